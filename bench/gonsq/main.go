// gonsq: go-nsq v1.1 used the way applications use it, for bench/compare.sh.
//
//	gonsq -mode pub      -concurrency 8: 8 Producers (8 connections), each publishing one
//	                     message per round trip (Producer.Publish) for -runfor
//	gonsq -mode pub -shared: one Producer (one connection) used by -concurrency goroutines,
//	                     each publishing one message per round trip: go-nsq pipelines their
//	                     PUBs on the connection (the usual way a web service shares a Producer)
//	gonsq -mode consumer one Consumer, MaxInFlight -max-in-flight (2500), draining the
//	                     topic's backlog for -runfor (or until nothing came for -idle)
//	gonsq -mode fanout   -channels 10 Consumers on channels <channel>0..9 of one topic,
//	                     draining until nothing came for -idle (at most -runfor)
//
// Prints one line: RESULT writer|reader msgs=N secs=S msgs_per_sec=R
//
// Build: `go mod tidy && go build` in this directory (fetches go-nsq v1.1.0 and its snappy
// dependency from the Go module proxy); bench/compare.sh runs it as $GONSQ.
package main

import (
	"flag"
	"fmt"
	"io/ioutil"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqio/go-nsq"
)

var (
	mode     = flag.String("mode", "pub", "pub|consumer|fanout")
	addr     = flag.String("addr", "127.0.0.1:4150", "nsqd TCP address")
	topic    = flag.String("topic", "sub_bench", "topic")
	channel  = flag.String("channel", "ch", "channel (fanout: prefix)")
	size     = flag.Int("size", 200, "message size (pub)")
	conc     = flag.Int("concurrency", 8, "producers (pub)")
	shared   = flag.Bool("shared", false, "pub: one Producer shared by the -concurrency goroutines")
	runfor   = flag.Duration("runfor", 3*time.Second, "how long to run")
	mif      = flag.Int("max-in-flight", 2500, "consumer MaxInFlight")
	channels = flag.Int("channels", 10, "channels (fanout)")
	idle     = flag.Duration("idle", time.Second, "consumers stop after this long without a message")
)

type counter struct{ n int64 }

func (c *counter) HandleMessage(*nsq.Message) error { atomic.AddInt64(&c.n, 1); return nil }

func publish(cfg *nsq.Config, quiet *log.Logger) {
	body := make([]byte, *size)
	var total int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(*runfor)
	var one *nsq.Producer
	for i := 0; i < *conc; i++ {
		p := one
		if p == nil {
			var err error
			if p, err = nsq.NewProducer(*addr, cfg); err != nil {
				log.Fatal(err)
			}
			p.SetLogger(quiet, nsq.LogLevelError)
			if *shared {
				one = p
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for time.Now().Before(stop) {
				if err := p.Publish(*topic, body); err != nil {
					log.Fatal(err)
				}
				n++
			}
			atomic.AddInt64(&total, n)
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	fmt.Printf("RESULT writer msgs=%d secs=%.3f msgs_per_sec=%.0f\n", total, secs, float64(total)/secs)
}

func consume(cfg *nsq.Config, quiet *log.Logger, n int) {
	counters := make([]*counter, n)
	cfg.MaxInFlight = *mif
	for i := range counters {
		ch := *channel
		if *mode == "fanout" {
			ch = fmt.Sprintf("%s%d", *channel, i)
		}
		c, err := nsq.NewConsumer(*topic, ch, cfg)
		if err != nil {
			log.Fatal(err)
		}
		c.SetLogger(quiet, nsq.LogLevelError)
		counters[i] = &counter{}
		c.AddHandler(counters[i])
		if err := c.ConnectToNSQD(*addr); err != nil {
			log.Fatal(err)
		}
	}
	sum := func() (t int64) {
		for _, c := range counters {
			t += atomic.LoadInt64(&c.n)
		}
		return
	}
	for sum() == 0 {
		time.Sleep(time.Millisecond)
	}
	first := time.Now()
	last, lastAt := sum(), time.Now()
	for time.Since(first) < *runfor {
		time.Sleep(5 * time.Millisecond)
		if s := sum(); s != last {
			last, lastAt = s, time.Now()
		} else if time.Since(lastAt) > *idle {
			break
		}
	}
	end := time.Now()
	if time.Since(lastAt) > *idle {
		end = lastAt
	}
	secs := end.Sub(first).Seconds()
	fmt.Printf("RESULT reader msgs=%d secs=%.3f msgs_per_sec=%.0f\n", last, secs, float64(last)/secs)
}

func main() {
	flag.Parse()
	cfg := nsq.NewConfig()
	quiet := log.New(ioutil.Discard, "", 0)
	switch *mode {
	case "pub":
		publish(cfg, quiet)
	case "consumer":
		consume(cfg, quiet, 1)
	case "fanout":
		consume(cfg, quiet, *channels)
	default:
		log.Fatalf("unknown -mode %q", *mode)
	}
}
