// A laravel-worker handler in Go, for the process and persistent modes.
//
//	go build -o /srv/handlers/handler handler.go
//
//	[[handlers]]
//	match = "App\\Jobs\\*"
//	command = ["/srv/handlers/handler"]
//	# mode = "persistent"   # keep it warm: one process takes job after job
//
// handle runs one job and returns the answer. This one does what the job's
// data.action asks (done by default; "throw" returns an error), so every
// answer can be tried with `laravel-worker push default --job 'App\Jobs\Try'
// --data '{"action":"release","delay":5}'`. Replace its body with the real work.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Job is what the worker says about a call.
type Job struct {
	Mode      string // "run", or "failed" for the failed hook
	Name      string // the displayName
	Attempt   int
	Exception string // failed mode: the recorded failure
	Payload   []byte // the payload JSON, as reserved
}

// Answer is one of {"action":"done"}, {"action":"release","delay":30},
// {"action":"fail","reason":"…"}, {"action":"delete"} and
// {"action":"exception","class":"…","message":"…"}.
type Answer map[string]any

func handle(job Job) (Answer, error) {
	if job.Mode == "failed" { // the worker failed the job
		fmt.Fprintf(os.Stderr, "failed hook for %s: %s\n", job.Name, job.Exception)
		return Answer{"action": "done"}, nil
	}
	var payload struct {
		Data map[string]any `json:"data"`
	}
	_ = json.Unmarshal(job.Payload, &payload) // a data that is no object stays empty
	fmt.Fprintf(os.Stderr, "running %s, attempt %d\n", job.Name, job.Attempt)
	switch payload.Data["action"] {
	case nil:
		return Answer{"action": "done"}, nil
	case "throw":
		return nil, errors.New("the job asked to throw")
	default:
		return Answer(payload.Data), nil
	}
}

// answer runs handle; an error becomes the exception the worker records.
func answer(job Job) Answer {
	a, err := handle(job)
	if err != nil {
		return Answer{"action": "exception", "class": "error", "message": err.Error()}
	}
	return a
}

func main() {
	if os.Getenv("LARAVEL_WORKER_PROTOCOL") == "persistent" {
		// One request per line on stdin; exactly one answer per request on
		// fd 3, echoing its "call". End of stdin means exit.
		answers := os.NewFile(3, "answers")
		in := bufio.NewReader(os.Stdin)
		for {
			line, err := in.ReadBytes('\n')
			if len(line) == 0 && err != nil {
				return
			}
			var request struct {
				Call      json.RawMessage `json:"call"`
				Mode      string          `json:"mode"`
				Name      string          `json:"name"`
				Attempt   int             `json:"attempt"`
				Exception string          `json:"exception"`
				Payload   string          `json:"payload"`
			}
			if err := json.Unmarshal(line, &request); err != nil {
				fmt.Fprintln(os.Stderr, "unreadable request:", err)
				os.Exit(1)
			}
			a := answer(Job{request.Mode, request.Name, request.Attempt,
				request.Exception, []byte(request.Payload)})
			a["call"] = request.Call
			out, _ := json.Marshal(a)
			if _, err := answers.Write(append(out, '\n')); err != nil {
				os.Exit(1)
			}
		}
	}
	// One job per process: the payload on stdin, the rest in the environment.
	// Exit 0 = done; any other answer goes to the result file.
	payload, err := io.ReadAll(os.Stdin)
	if err != nil {
		os.Exit(1)
	}
	attempt, _ := strconv.Atoi(os.Getenv("LARAVEL_WORKER_ATTEMPT"))
	a := answer(Job{os.Getenv("LARAVEL_WORKER_MODE"), os.Getenv("LARAVEL_WORKER_JOB_NAME"),
		attempt, os.Getenv("LARAVEL_WORKER_EXCEPTION"), payload})
	if a["action"] != "done" {
		out, _ := json.Marshal(a)
		if err := os.WriteFile(os.Getenv("LARAVEL_WORKER_RESULT"), out, 0o600); err != nil {
			os.Exit(1)
		}
	}
}
