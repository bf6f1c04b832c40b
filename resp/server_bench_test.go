package resp

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"testing"
)

// benchmarkServer drives RL.TOKEN over loopback TCP from conns connections,
// pipeline requests per round trip, random keys out of 100000, and reports
// requests per second through the whole server (parser, dispatch,
// engine, reply).
func benchmarkServer(b *testing.B, conns, pipeline int) {
	addr := startServer(b, Config{})
	per := b.N/conns + 1
	var wg sync.WaitGroup
	b.ResetTimer()
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer nc.Close()
			rd := bufio.NewReader(nc)
			var batch []byte
			for i := 0; i < per; i += pipeline {
				batch = batch[:0]
				for j := 0; j < pipeline; j++ {
					key := fmt.Sprintf("tb:%012d", (c*7919+i+j)%100000)
					batch = fmt.Appendf(batch, "*4\r\n$8\r\nRL.TOKEN\r\n$%d\r\n%s\r\n$3\r\n100\r\n$4\r\n10/s\r\n", len(key), key)
				}
				if _, err := nc.Write(batch); err != nil {
					b.Error(err)
					return
				}
				for j := 0; j < pipeline; j++ {
					// Each reply is *5 then five integer lines.
					for k := 0; k < 6; k++ {
						if _, err := rd.ReadSlice('\n'); err != nil {
							b.Error(err)
							return
						}
					}
				}
			}
		}(c)
	}
	wg.Wait()
}

func BenchmarkServerTokenP1(b *testing.B)  { benchmarkServer(b, 50, 1) }
func BenchmarkServerTokenP16(b *testing.B) { benchmarkServer(b, 50, 16) }
