// go_http — Go net/http hello-world server, a peer for the HTTP benchmark.
// Run with GOMAXPROCS=1 (or 2 for the two-thread rows).
//
//	go_http -port P
package main

import (
	"flag"
	"fmt"
	"net/http"
)

func main() {
	port := flag.Int("port", 8080, "port")
	flag.Parse()
	body := []byte("Hello, World!")
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	addr := fmt.Sprintf("127.0.0.1:%d", *port)
	fmt.Printf("go_http: listening on %s\n", addr)
	if err := http.ListenAndServe(addr, nil); err != nil {
		panic(err)
	}
}
