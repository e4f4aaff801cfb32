// Package worker is the Go worker of the kubeless-rs runtime proxy.
//
// `kubeless-runtime compile` builds the user's function together with a tiny main that calls
// Run with the handler. The proxy starts N such processes; each connects to the unix socket
// named by KUBELESS_WORKER_SOCKET and answers one framed call at a time: u32 header length,
// JSON header, u32 body length, body. Function output (fmt.Println, log) goes to the process's
// stdout/stderr, which the proxy passes through to the container log.
package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/kubeless/kubeless/pkg/functions"
)

// Handler is Kubeless's Go function signature.
type Handler func(functions.Event, functions.Context) (string, error)

const coalesce = 64 * 1024

type requestHead struct {
	Method     string      `json:"method"`
	Path       string      `json:"path"`
	Query      string      `json:"query"`
	URL        string      `json:"url"`
	Headers    [][2]string `json:"headers"`
	RemoteAddr *string     `json:"remote_addr"`
}

type responseHead struct {
	Status  int         `json:"status"`
	Headers [][2]string `json:"headers"`
	Error   string      `json:"error,omitempty"`
}

type hello struct {
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
	Pid   int    `json:"pid,omitempty"`
}

// responseWriter buffers what the function writes through event.Extensions.Response.
type responseWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

type channel struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func (c *channel) read() (*requestHead, []byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		return nil, nil, err
	}
	head := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c.r, head); err != nil {
		return nil, nil, err
	}
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		return nil, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, nil, err
	}
	var h requestHead
	if err := json.Unmarshal(head, &h); err != nil {
		return nil, nil, fmt.Errorf("bad request header: %w", err)
	}
	return &h, body, nil
}

func (c *channel) write(head interface{}, body []byte) error {
	h, err := json.Marshal(head)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(h)))
	c.w.Write(n[:])
	c.w.Write(h)
	binary.BigEndian.PutUint32(n[:], uint32(len(body)))
	c.w.Write(n[:])
	if len(body) > coalesce {
		if err := c.w.Flush(); err != nil {
			return err
		}
		if _, err := c.conn.Write(body); err != nil {
			return err
		}
		return nil
	}
	c.w.Write(body)
	return c.w.Flush()
}

// Run serves calls until the proxy closes the socket. It never returns normally.
func Run(handler Handler) {
	path := os.Getenv("KUBELESS_WORKER_SOCKET")
	if path == "" {
		fmt.Fprintln(os.Stderr, "kubeless worker: KUBELESS_WORKER_SOCKET is not set")
		os.Exit(2)
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeless worker: cannot connect:", err)
		os.Exit(1)
	}
	c := &channel{conn: conn, r: bufio.NewReaderSize(conn, coalesce), w: bufio.NewWriterSize(conn, coalesce)}
	if handler == nil {
		c.write(hello{Ready: false, Error: "handler is nil"}, nil)
		os.Exit(1)
	}
	if err := c.write(hello{Ready: true, Pid: os.Getpid()}, nil); err != nil {
		fmt.Fprintln(os.Stderr, "kubeless worker: handshake failed:", err)
		os.Exit(1)
	}
	fctx := functions.Context{
		FunctionName: os.Getenv("FUNC_HANDLER"),
		Timeout:      os.Getenv("FUNC_TIMEOUT"),
		Runtime:      os.Getenv("FUNC_RUNTIME"),
		MemoryLimit:  os.Getenv("FUNC_MEMORY_LIMIT"),
	}
	timeout := 180 * time.Second
	if s, err := strconv.ParseFloat(strings.TrimSpace(fctx.Timeout), 64); err == nil && s > 0 {
		timeout = time.Duration(s * float64(time.Second))
	}
	for {
		head, body, err := c.read()
		if err == io.EOF {
			os.Exit(0)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubeless worker: cannot read a call:", err)
			os.Exit(1)
		}
		rhead, rbody := invoke(handler, fctx, timeout, head, body)
		if err := c.write(rhead, rbody); err != nil {
			fmt.Fprintln(os.Stderr, "kubeless worker: cannot answer:", err)
			os.Exit(1)
		}
	}
}

func failure(msg string) (responseHead, []byte) {
	fmt.Fprintln(os.Stderr, msg)
	return responseHead{
		Status:  http.StatusInternalServerError,
		Headers: [][2]string{{"content-type", "text/plain; charset=utf-8"}},
		Error:   msg,
	}, []byte("Internal Server Error\n")
}

func invoke(handler Handler, fctx functions.Context, timeout time.Duration, head *requestHead, body []byte) (rhead responseHead, rbody []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, head.Method, head.URL, bytes.NewReader(body))
	if err != nil {
		return failure(fmt.Sprintf("cannot build the request: %v", err))
	}
	req.RequestURI = head.URL
	for _, kv := range head.Headers {
		req.Header.Add(kv[0], kv[1])
	}
	req.Host = req.Header.Get("Host")
	if head.RemoteAddr != nil {
		req.RemoteAddr = *head.RemoteAddr
	}
	w := &responseWriter{header: http.Header{}}
	event := functions.Event{
		Data:           string(body),
		EventID:        req.Header.Get("event-id"),
		EventType:      req.Header.Get("event-type"),
		EventTime:      req.Header.Get("event-time"),
		EventNamespace: req.Header.Get("event-namespace"),
		Extensions:     functions.Extension{Request: req, Response: w, Context: ctx},
	}
	defer func() {
		if p := recover(); p != nil {
			rhead, rbody = failure(fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
		}
	}()
	out, err := handler(event, fctx)
	if err != nil {
		return failure(fmt.Sprintf("function returned an error: %v", err))
	}
	w.body.WriteString(out)
	rbody = w.body.Bytes()
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	headers := make([][2]string, 0, len(w.header)+1)
	for k, vs := range w.header {
		for _, v := range vs {
			headers = append(headers, [2]string{k, v})
		}
	}
	if w.header.Get("Content-Type") == "" && len(rbody) > 0 {
		headers = append(headers, [2]string{"content-type", http.DetectContentType(rbody)})
	}
	return responseHead{Status: status, Headers: headers}, rbody
}
