package main

// The relay side: registers a realm host's devices through ingest's native API and
// sends notifications (`POST /v1/notify`, each one push per device of its user) at a
// fixed rate or unpaced (as fast as the connections to ingest let), then waits until
// every push has its outcome — the provider fakes' answer counts (`/stats`) and the
// stages' `pushrelay_deliveries_total` (encryptor + dispatcher) and, when tokens were
// made dead, feedback's `pushrelay_invalidations_total`. CPU of the named processes
// (/proc/PID/stat, utime + stime) is read around the measured window; shell commands
// can run just before and after it (callgrind_control).

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

type realm struct{ server, key, uuid string }

type driver struct {
	ingest, control string
	ops             map[string]string
	client          *http.Client
}

func (d *driver) do(method, url, contentType string, body []byte, r *realm) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("content-type", contentType)
	}
	if r != nil {
		req.SetBasicAuth(r.server, r.key)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func (d *driver) postJSON(path string, v any, r *realm) (int, []byte, error) {
	body, _ := json.Marshal(v)
	return d.do("POST", d.ingest+path, "application/json", body, r)
}

func (d *driver) newRealm() (*realm, error) {
	alnum := "abcdefghijklmnopqrstuvwxyz0123456789"
	key := make([]byte, 64)
	rand.Read(key)
	for i, b := range key {
		key[i] = alnum[int(b)%len(alnum)]
	}
	r := &realm{server: uuid4(), key: string(key), uuid: uuid4()}
	form := "zulip_org_id=" + r.server + "&zulip_org_key=" + r.key +
		"&hostname=bench.example.com&contact_email=admin%40bench.example.com"
	status, body, err := d.do("POST", d.ingest+"/api/v1/remotes/server/register",
		"application/x-www-form-urlencoded", []byte(form), nil)
	if err != nil || status != 200 {
		return nil, fmt.Errorf("server registration: %d %s %v", status, body, err)
	}
	status, body, err = d.postJSON("/v1/realms", map[string]any{"realm_uuid": r.uuid}, r)
	if err != nil || status != 201 {
		return nil, fmt.Errorf("realm registration: %d %s %v", status, body, err)
	}
	return r, nil
}

func (d *driver) get(url string) ([]byte, error) {
	status, body, err := d.do("GET", url, "", nil, nil)
	if err == nil && status != 200 {
		err = fmt.Errorf("GET %s: %d", url, status)
	}
	return body, err
}

// fakeStats: provider → status → answers so far.
func (d *driver) fakeStats() (map[string]map[string]int, error) {
	body, err := d.get(d.control + "/stats")
	if err != nil {
		return nil, err
	}
	var stats map[string]map[string]int
	err = json.Unmarshal(body, &stats)
	delete(stats, "connections")
	return stats, err
}

func total(stats map[string]map[string]int) int {
	n := 0
	for _, byStatus := range stats {
		for _, c := range byStatus {
			n += c
		}
	}
	return n
}

// metric sums a Prometheus counter over its label sets at a stage's ops URL.
func (d *driver) metric(stage, name string) float64 {
	body, err := d.get(d.ops[stage] + "/metrics")
	if err != nil {
		return 0
	}
	sum := 0.0
	scanner := bufio.NewScanner(bytes.NewReader(body))
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func (d *driver) outcomes() float64 {
	return d.metric("encryptor", "pushrelay_deliveries_total") + d.metric("dispatcher", "pushrelay_deliveries_total")
}

// procCPU reads utime + stime of a process, in seconds.
func procCPU(pid string) float64 {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return -1
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	user, _ := strconv.ParseFloat(fields[11], 64)
	system, _ := strconv.ParseFloat(fields[12], 64)
	return (user + system) / 100 // USER_HZ is 100 on Linux
}

// procSwitches sums the voluntary and involuntary context switches of every thread
// of a process (/proc/PID/task/*/status); threads that ended are not counted.
func procSwitches(pid string) float64 {
	paths, _ := filepath.Glob("/proc/" + pid + "/task/*/status")
	total := 0.0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "voluntary_ctxt_switches:") || strings.HasPrefix(line, "nonvoluntary_ctxt_switches:") {
				n, _ := strconv.ParseFloat(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), 64)
				total += n
			}
		}
	}
	return total
}

func shell(cmd string) {
	if cmd == "" {
		return
	}
	c := exec.Command("sh", "-c", cmd)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		fail(fmt.Errorf("%q: %v", cmd, err))
	}
}

func messagePayload(user, message int) map[string]any {
	return map[string]any{
		"channel_id": 10, "channel_name": "Denmark", "content": fmt.Sprintf("load %d", message),
		"message_id": message, "realm_name": "Zulip Dev", "realm_url": "http://zulip.testserver",
		"recipient_type": "channel", "sender_avatar_url": "https://secure.gravatar.com/avatar/x?d=identicon&version=1",
		"sender_full_name": "aaron", "sender_id": 6, "time": 1754385395, "topic": "test", "type": "message",
		"user_id": user,
	}
}

func runDrive(args []string) {
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	d := &driver{ops: map[string]string{}}
	fs.StringVar(&d.ingest, "ingest", "", "ingest API URL")
	fs.StringVar(&d.control, "control", "", "provider fakes' control URL")
	opsEncryptor := fs.String("ops-encryptor", "", "encryptor health/metrics URL")
	opsDispatcher := fs.String("ops-dispatcher", "", "dispatcher health/metrics URL")
	opsFeedback := fs.String("ops-feedback", "", "feedback health/metrics URL")
	realms := fs.Int("realms", 1, "realms (servers)")
	users := fs.Int("users", 500, "users")
	apnsPerUser := fs.Int("devices-per-user", 1, "APNs devices per user: the pushes of one notification")
	fcm := fs.Bool("fcm", false, "an FCM device per user besides the APNs ones")
	rate := fs.Int("rate", 400, "notifications per second (0: unpaced, as fast as -connections lets)")
	warmup := fs.Int("warmup", 2000, "notifications before the measured window")
	n := fs.Int("n", 12000, "notifications in the measured window")
	dead := fs.Int("dead", 0, "APNs tokens marked dead at the fake before the measured window")
	cpuPids := fs.String("cpu", "", "processes whose CPU to measure: name=pid,...")
	before := fs.String("before", "", "shell command run just before the measured window")
	after := fs.String("after", "", "shell command run once every measured push has its outcome")
	connections := fs.Int("connections", 64, "keep-alive connections to ingest")
	drainTimeout := fs.Duration("drain-timeout", 180*time.Second, "longest wait for the outcomes")
	fs.Parse(args)
	d.ops["encryptor"], d.ops["dispatcher"], d.ops["feedback"] = *opsEncryptor, *opsDispatcher, *opsFeedback
	d.client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: *connections, MaxConnsPerHost: *connections, IdleConnTimeout: 10 * time.Minute}}

	// Devices: user u has -devices-per-user APNs devices (and an FCM one with -fcm), each
	// with a token and a push key of its own.
	var rs []*realm
	for i := 0; i < *realms; i++ {
		r, err := d.newRealm()
		if err != nil {
			fail(err)
		}
		rs = append(rs, r)
	}
	perUser := *apnsPerUser
	if *fcm {
		perUser++
	}
	logf("registering %d devices for %d users", *users*perUser, *users)
	apnsTokens := make([][]string, *users+1)
	var regErr error
	var mu sync.Mutex
	paced(*users, 0, 16, func(i int) {
		u := i + 1
		r := rs[u%len(rs)]
		var devices []map[string]any
		for k := 0; k < *apnsPerUser; k++ {
			apnsTokens[u] = append(apnsTokens[u], randomHex(32))
			devices = append(devices, map[string]any{
				"token_kind": "apns", "token": apnsTokens[u][k], "ios_app_id": "org.zulip.Zulip"})
		}
		if *fcm {
			devices = append(devices, map[string]any{"token_kind": "fcm", "token": "fcm:" + uuid4() + uuid4()})
		}
		for _, dev := range devices {
			key := make([]byte, 33)
			key[0] = 0x31 // a tagged secretbox key
			rand.Read(key[1:])
			dev["realm_uuid"], dev["user_id"] = r.uuid, u
			dev["push_key"], dev["push_key_id"] = base64.StdEncoding.EncodeToString(key), 1
			status, body, err := d.postJSON("/v1/devices", dev, r)
			if err != nil || status >= 300 {
				mu.Lock()
				regErr = fmt.Errorf("device registration: %d %s %v", status, body, err)
				mu.Unlock()
			}
		}
	})
	if regErr != nil {
		fail(regErr)
	}

	next := 0 // notification index; user = index % users + 1, round robin
	notify := func(count int) (accepted, rejected int) {
		var mu sync.Mutex
		base := next
		next += count
		paced(count, *rate, *connections, func(i int) {
			m := base + i
			u := m%*users + 1
			r := rs[u%len(rs)]
			status, _, err := d.postJSON("/v1/notify",
				map[string]any{"realm_uuid": r.uuid, "user_id": u, "payload": messagePayload(u, m)}, r)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && status == 202 {
				accepted++
			} else {
				rejected++
				if rejected <= 3 {
					logf("notify: %d %v", status, err)
				}
			}
		})
		return
	}
	// waitOutcomes waits until the fakes answered `requests` more pushes, the stages
	// recorded `outcomes` more outcomes and feedback `invalidations` more invalidations.
	waitOutcomes := func(stats0 map[string]map[string]int, outcomes0, invalidations0 float64,
		requests, outcomes, invalidations int) bool {
		deadline := time.Now().Add(*drainTimeout)
		for time.Now().Before(deadline) {
			if s, err := d.fakeStats(); err == nil && total(s)-total(stats0) >= requests {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for time.Now().Before(deadline) {
			if d.outcomes()-outcomes0 >= float64(outcomes) &&
				(invalidations == 0 || d.metric("feedback", "pushrelay_invalidations_total")-invalidations0 >= float64(invalidations)) {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}

	logf("warm-up: %d notifications %s", *warmup, pace(*rate))
	stats0, _ := d.fakeStats()
	out0 := d.outcomes()
	acc, rej := notify(*warmup)
	if !waitOutcomes(stats0, out0, 0, acc*perUser, acc*perUser, 0) {
		fail(fmt.Errorf("warm-up did not drain"))
	}
	if rej > 0 {
		logf("warm-up: %d notifications not accepted", rej)
	}

	// Dead tokens: the APNs tokens of the first users of the measured window, `dead` in
	// all; each has its first push of the window refused with 410, then its later ones
	// dropped by the encryptor.
	windowCount := map[int]int{}
	for i := 0; i < *n; i++ {
		windowCount[(next+i)%*users+1]++
	}
	deadRequestsSaved, marked := 0, 0
	for k := 0; marked < *dead && k < *users && k < *n; k++ {
		u := (next+k)%*users + 1
		for _, token := range apnsTokens[u] {
			if marked == *dead {
				break
			}
			body, _ := json.Marshal(map[string]any{"token": token})
			if status, _, err := d.do("POST", d.control+"/apns/unregistered", "application/json", body, nil); err != nil || status != 200 {
				fail(fmt.Errorf("marking a token dead: %d %v", status, err))
			}
			deadRequestsSaved += windowCount[u] - 1
			marked++
		}
	}
	time.Sleep(time.Second) // the marks' timestamps are after every registration by now

	pids := map[string]string{}
	for _, kv := range strings.Split(*cpuPids, ",") {
		if parts := strings.SplitN(kv, "=", 2); len(parts) == 2 {
			pids[parts[0]] = parts[1]
		}
	}
	cpu0, switches0 := map[string]float64{}, map[string]float64{}
	for name, pid := range pids {
		cpu0[name] = procCPU(pid)
		switches0[name] = procSwitches(pid)
	}
	stats0, _ = d.fakeStats()
	out0 = d.outcomes()
	inv0 := d.metric("feedback", "pushrelay_invalidations_total")
	shell(*before)
	logf("measured: %d notifications %s", *n, pace(*rate))
	t0 := time.Now()
	acc, rej = notify(*n)
	sendSeconds := time.Since(t0).Seconds()
	requests := acc*perUser - deadRequestsSaved
	invalidations := marked
	if rej > 0 { // a refused notification makes the expected counts unknowable: wait for the pushes only
		requests, invalidations = acc*perUser-deadRequestsSaved-rej*perUser, 0
	}
	drained := waitOutcomes(stats0, out0, inv0, requests, acc*perUser, invalidations)
	wall := time.Since(t0).Seconds()
	cpu, switches := map[string]float64{}, map[string]float64{}
	for name, pid := range pids {
		cpu[name] = procCPU(pid) - cpu0[name]
		switches[name] = procSwitches(pid) - switches0[name]
	}
	shell(*after)
	stats1, _ := d.fakeStats()
	delta := map[string]map[string]int{}
	for provider, byStatus := range stats1 {
		for status, c := range byStatus {
			if c-stats0[provider][status] != 0 {
				if delta[provider] == nil {
					delta[provider] = map[string]int{}
				}
				delta[provider][status] = c - stats0[provider][status]
			}
		}
	}
	if !drained {
		logf("not every push had its outcome after %v", *drainTimeout)
	}

	// What the relay's APNs pushes look like at the fake (body size, headers).
	var sample struct {
		Bytes   int               `json:"bytes"`
		Headers map[string]string `json:"headers"`
	}
	if body, err := d.get(d.control + "/apns/received"); err == nil {
		var received []struct {
			Body    json.RawMessage   `json:"body"`
			Headers map[string]string `json:"headers"`
			Status  int               `json:"status"`
		}
		if json.Unmarshal(body, &received) == nil {
			for i := len(received) - 1; i >= 0; i-- {
				if received[i].Status == 200 {
					var compact bytes.Buffer
					json.Compact(&compact, received[i].Body)
					sample.Bytes, sample.Headers = compact.Len(), received[i].Headers
					break
				}
			}
		}
	}
	printJSON(map[string]any{
		"notifications": *n, "accepted": acc, "rejected": rej, "devices_per_user": perUser,
		"apns_devices_per_user": *apnsPerUser, "users": *users, "rate": *rate, "dead_tokens": marked,
		"pushes": total(delta), "provider_requests": delta, "provider_requests_expected": requests,
		"outcomes": d.outcomes() - out0, "invalidations": d.metric("feedback", "pushrelay_invalidations_total") - inv0,
		"drained": drained, "send_seconds": sendSeconds, "wall_seconds": wall, "cpu_seconds": cpu,
		"context_switches": switches,
		"apns_sample":      sample,
	})
}
