package web

import (
	"log/slog"
	"net/http"
	"time"
)

// SignInForm is the hub's sign-in page: a form that posts a read token
// once.
type SignInForm struct {
	// Action is the address the form posts to.
	Action string
	// Next is the page to go back to after signing in.
	Next string
	// Error says why the last attempt failed, or why a sign-in is needed.
	Error string
	// Session is how long a session lasts.
	Session time.Duration
}

// WriteSignIn writes the sign-in page with status (401 for a page asked
// without credentials, 403 for a refused token).
func WriteSignIn(w http.ResponseWriter, status int, f SignInForm, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	view := struct {
		SignInForm
		Hours int
	}{f, int(f.Session / time.Hour)}
	writePage(w, status, "signin.html", view, log)
}
