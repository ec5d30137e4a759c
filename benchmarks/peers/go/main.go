// peerbench: the Go side of scripts/bench-peer.sh and scripts/bench-instructions.sh.
//
//	peerbench apns  ...   the Go APNs sender (apns.go), against an APNs endpoint
//	peerbench drive ...   drives a PushRelay stack through ingest's native API (drive.go)
//
// Both print one JSON object on stdout; progress goes to stderr.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peerbench apns|drive [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "apns":
		runAPNs(os.Args[2:])
	case "drive":
		runDrive(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func fail(err error) {
	logf("error: %v", err)
	os.Exit(1)
}

func printJSON(v any) {
	out, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(out))
}

// selfCPU is this process's user + system CPU seconds (all threads).
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func uuid4() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// apnsBody is an APNs body shaped like the relay's (alert title, mutable-content,
// encrypted_data, push_key_id) of exactly `size` bytes.
func apnsBody(size int) []byte {
	head := `{"aps":{"alert":{"title":"New notification"},"mutable-content":1},"encrypted_data":"`
	tail := `","push_key_id":1}`
	pad := size - len(head) - len(tail)
	if pad < 0 {
		pad = 0
	}
	return []byte(head + strings.Repeat("A", pad) + tail)
}

// pace describes a rate for the logs.
func pace(rate int) string {
	if rate == 0 {
		return "unpaced"
	}
	return fmt.Sprintf("at %d/s", rate)
}

// paced calls fn(i) for i in [0, n) at `rate` per second (0: as fast as the
// concurrency bound lets), each in its own goroutine, at most `concurrency` at once,
// and returns when every call has returned.
func paced(n, rate, concurrency int, fn func(i int)) {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}(i)
	}
	wg.Wait()
}

// tally counts answers by status and errors by message.
type tally struct {
	mu       sync.Mutex
	statuses map[string]int
	errors   map[string]int
}

func newTally() *tally { return &tally{statuses: map[string]int{}, errors: map[string]int{}} }

func (t *tally) add(status int, problem string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if status > 0 {
		t.statuses[fmt.Sprint(status)]++
	}
	if problem != "" {
		if len(t.errors) < 20 || t.errors[problem] > 0 {
			t.errors[problem]++
		} else {
			t.errors["(other)"]++
		}
	}
}

func (t *tally) errorCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.errors {
		n += c
	}
	return n
}

func runAPNs(args []string) {
	fs := flag.NewFlagSet("apns", flag.ExitOnError)
	url := fs.String("url", "", "APNs base URL, e.g. https://localhost:8443")
	ca := fs.String("ca", "", "CA certificate (PEM) the endpoint's certificate chains to")
	keyFile := fs.String("key", "", "APNs signing key (.p8, PKCS#8 PEM)")
	keyID := fs.String("key-id", "", "APNs key id")
	teamID := fs.String("team-id", "", "APNs team id")
	topic := fs.String("topic", "org.zulip.Zulip", "apns-topic")
	rate := fs.Int("rate", 400, "pushes per second (0: unpaced, as fast as -concurrency lets)")
	warmup := fs.Int("warmup", 2000, "pushes before the measured window")
	n := fs.Int("n", 12000, "pushes in the measured window")
	size := fs.Int("payload-bytes", 300, "body size")
	devices := fs.Int("devices", 1000, "distinct device tokens")
	concurrency := fs.Int("concurrency", 256, "pushes in flight at most")
	fs.Parse(args)

	key, err := loadKey(*keyFile)
	if err != nil {
		fail(err)
	}
	client, err := newAPNsClient(*ca)
	if err != nil {
		fail(err)
	}
	tok := &token{key: key, keyID: *keyID, teamID: *teamID}
	tokens := make([]string, *devices)
	for i := range tokens {
		tokens[i] = randomHex(32)
	}
	body := apnsBody(*size)
	run := func(count int, t *tally) {
		paced(count, *rate, *concurrency, func(i int) {
			p := push{token: tokens[i%len(tokens)], topic: *topic, id: uuid4(), body: body,
				expiration: time.Now().Unix() + 86400}
			p.collapseID = p.id[:8] + "-" + fmt.Sprint(i%len(tokens))
			status, reason, err := send(client, *url, tok, p)
			problem := ""
			if err != nil {
				problem = err.Error()
			} else if status != 200 {
				problem = fmt.Sprintf("%d %s", status, strings.TrimSpace(reason))
			}
			t.add(status, problem)
		})
	}
	logf("go sender: warm-up %d pushes %s", *warmup, pace(*rate))
	run(*warmup, newTally())
	logf("go sender: measuring %d pushes %s", *n, pace(*rate))
	measured := newTally()
	cpu0, t0 := selfCPU(), time.Now()
	run(*n, measured)
	cpu, wall := selfCPU()-cpu0, time.Since(t0).Seconds()
	printJSON(map[string]any{
		"sender": "go", "pushes": *n, "statuses": measured.statuses, "errors": measured.errorCount(),
		"error_samples": measured.errors, "cpu_seconds": cpu, "wall_seconds": wall, "payload_bytes": len(body),
		"rate": *rate,
	})
}
