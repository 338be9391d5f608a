// Command pause is the tests' pod sandbox image: it blocks until SIGTERM or
// SIGINT, as the real pause container does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
