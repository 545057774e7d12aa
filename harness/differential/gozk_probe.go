// A go-zookeeper client (Debian's samuel/go-zookeeper) sending requests from several goroutines
// on one connection, for harness/differential/xids.py's check of each client's real xids:
// go-zookeeper takes an xid before it queues a request, so two goroutines' requests may reach
// the server in the other order.  Run by harness/differential/gozk.py (run_probe).
//
//     gozk_probe HOST:PORT /ROOT GOROUTINES REQUESTS
//
// Prints "ok N errors M" and exits 0 when every request was answered without error.
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/samuel/go-zookeeper/zk"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: gozk_probe HOST:PORT /ROOT GOROUTINES REQUESTS")
		os.Exit(2)
	}
	root := os.Args[2]
	goroutines, _ := strconv.Atoi(os.Args[3])
	requests, _ := strconv.Atoi(os.Args[4])
	conn, _, err := zk.Connect([]string{os.Args[1]}, 30*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		fmt.Println("connect:", err)
		os.Exit(1)
	}
	defer conn.Close()
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		fmt.Println("create root:", err)
		os.Exit(1)
	}
	var ok, failed int64
	var group sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		group.Add(1)
		go func(g int) {
			defer group.Done()
			for i := 0; i < requests; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = conn.Create(fmt.Sprintf("%s/g%d-%d", root, g, i), nil, 0, zk.WorldACL(zk.PermAll))
				case 1:
					_, err = conn.Set(root, []byte("x"), -1)
				default:
					_, _, err = conn.Get(root)
				}
				if err != nil {
					atomic.AddInt64(&failed, 1)
				} else {
					atomic.AddInt64(&ok, 1)
				}
			}
		}(g)
	}
	group.Wait()
	fmt.Printf("ok %d errors %d\n", ok, failed)
	if failed != 0 {
		os.Exit(1)
	}
}

type quiet struct{}

func (quiet) Printf(string, ...interface{}) {}
