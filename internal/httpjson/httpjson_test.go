package httpjson

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWriteKeepsHTMLCharactersAndSetsTheHeaders(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusOK, map[string]string{"figure": "oomKills 2 ≥ 1 <b>"})
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"figure":"oomKills 2 ≥ 1 <b>"}`, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "<b>", "not escaped as \\u003c")
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
}

func TestWriteAnswersAnUnencodableValueWith500(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusOK, math.Inf(1))
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
	assert.Contains(t, rec.Body.String(), `"error":"encode answer: `)
}
