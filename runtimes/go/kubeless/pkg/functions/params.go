// Package functions holds the types a Kubeless Go function receives:
//
//	func Handler(event functions.Event, context functions.Context) (string, error)
//
// The field names are Kubeless's, so existing functions compile unchanged.
package functions

import (
	"context"
	"net/http"
)

// Event is one call of the function.
type Event struct {
	// Data is the request body, byte for byte (it may hold binary data).
	Data string
	// EventID is the `event-id` header.
	EventID string
	// EventType is the `event-type` header.
	EventType string
	// EventTime is the `event-time` header.
	EventTime string
	// EventNamespace is the `event-namespace` header.
	EventNamespace string
	// Extensions gives access to the HTTP request and response.
	Extensions Extension
}

// Extension carries the underlying HTTP exchange.
type Extension struct {
	// Request is the incoming HTTP request; its Body reads Data again.
	Request *http.Request
	// Response lets the function set the status code and headers, and write body bytes
	// that come before the returned string.
	Response http.ResponseWriter
	// Context is cancelled when the call's FUNC_TIMEOUT deadline passes.
	Context context.Context
}

// Context describes the function.
type Context struct {
	FunctionName string
	Timeout      string
	Runtime      string
	MemoryLimit  string
}
