// Package streamv1 is the protocol between a Kerf node agent and the
// elected leader (docs/design.md section 6): one long-lived gRPC stream per
// agent carrying throttling counters, OOM kills and container terminations
// up, and acks and resync requests down.
//
// The Go code is generated from stream.proto by hack/protoc.sh
// (`make generate`) and committed. Counters are delta-encoded against a
// per-stream container index so that an unchanged container costs at most
// 32 bytes per sample on the wire (docs/design.md section 10).
package streamv1
