// Package netguardtest gives tests a resolver that answers every name with
// the address they choose, so that a test can aim a name at a refused
// address (DNS rebinding) without a DNS server or /etc/hosts.
package netguardtest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
)

// Resolver returns a pure-Go resolver that answers every A query with addr
// and every other query with no records. Queries counts the A queries it
// answered, so a test can tell that its dial asked this resolver.
func Resolver(addr [4]byte) (*net.Resolver, *atomic.Int32) {
	queries := &atomic.Int32{}
	return &net.Resolver{PreferGo: true, Dial: dnsServer(addr, queries)}, queries
}

// dnsServer answers over a stream connection (the Go resolver frames a
// stream with a two-byte length, as DNS over TCP). Its goroutine ends when
// the resolver closes the connection.
func dnsServer(addr [4]byte, queries *atomic.Int32) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			for {
				var n uint16
				if err := binary.Read(server, binary.BigEndian, &n); err != nil {
					return
				}
				q := make([]byte, n)
				if _, err := io.ReadFull(server, q); err != nil {
					return
				}
				// The question: the name's labels, then type and class.
				end := 12
				for end < len(q) && q[end] != 0 {
					end += int(q[end]) + 1
				}
				end += 5
				if end > len(q) {
					return
				}
				qtype := binary.BigEndian.Uint16(q[end-4:])
				resp := append([]byte{}, q[:2]...)    // id
				resp = append(resp, 0x81, 0x80, 0, 1) // response, recursion; one question
				if qtype == 1 {
					queries.Add(1)
					resp = append(resp, 0, 1) // one answer
				} else {
					resp = append(resp, 0, 0)
				}
				resp = append(resp, 0, 0, 0, 0) // no authority, no additional
				resp = append(resp, q[12:end]...)
				if qtype == 1 {
					resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
					resp = append(resp, addr[:]...)
				}
				if err := binary.Write(server, binary.BigEndian, uint16(len(resp))); err != nil {
					return
				}
				if _, err := server.Write(resp); err != nil {
					return
				}
			}
		}()
		return client, nil
	}
}
