package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/sol/printable"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only our own response types get here; they always marshal.
		status, body = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// writeError answers {"error": msg}. msg is shown as is: callers quote any
// input they echo (quote) and pass foreign error text through safeText.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, api.Error{Error: msg})
}

// notFound is the one 404 an unknown route and a refused admin credential
// both get, so they cannot be told apart.
func notFound(w http.ResponseWriter) { writeError(w, http.StatusNotFound, "not found") }

// writeOK answers 200 with an empty body, as obmd did.
func writeOK(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }

// maxEcho bounds how much of an input is echoed in an error message.
const maxEcho = 64

// quote returns s quoted Go-style (control and non-printable characters
// escaped), shortened to maxEcho bytes: safe to echo in an error message.
func quote(s string) string { return printable.Quote(s, maxEcho) }

// safeText makes foreign error text (a driver's) safe to show: printable,
// one line, bounded.
func safeText(s string) string { return printable.Clean(s, 512) }

// errBody is a request body that could not be read or decoded; status is
// 400 or 413 and msg is safe to show.
type errBody struct {
	status int
	msg    string
}

func (e *errBody) Error() string { return e.msg }

func badBody(format string, args ...any) *errBody {
	return &errBody{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// writeBodyError answers an error from readBody or decode.
func writeBodyError(w http.ResponseWriter, err error) {
	var eb *errBody
	if errors.As(err, &eb) {
		writeError(w, eb.status, eb.msg)
		return
	}
	writeError(w, http.StatusBadRequest, "cannot read request body")
}

// readJSON reads the request body into v (strict: unknown fields are an
// error; with emptyOK an empty body leaves v as it is), answering the client
// itself when it cannot. It reports whether the handler should go on.
func (a *API) readJSON(w http.ResponseWriter, r *http.Request, v any, strict, emptyOK bool) bool {
	data, err := a.readBody(w, r)
	if err == nil && !(emptyOK && len(data) == 0) {
		err = decode(data, v, strict, "body")
	}
	if err != nil {
		writeBodyError(w, err)
		return false
	}
	return true
}

// readBody reads the whole body, at most the configured bound.
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &errBody{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body is larger than %d bytes", a.cfg.MaxBody)}
		}
		return nil, badBody("cannot read request body")
	}
	return data, nil
}

// decode parses data as exactly one JSON value into v. strict refuses
// unknown object fields. where names the value in messages ("body",
// "info"). Error texts never echo raw input.
func decode(data []byte, v any, strict bool, where string) error {
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD and store
	// something the client never sent.
	if !utf8.Valid(data) {
		return badBody("%s is not valid UTF-8", where)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(err, where)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badBody("unexpected data after the JSON value in %s", where)
	}
	return nil
}

// jsonError turns an encoding/json error into a safe message.
func jsonError(err error, where string) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return badBody("%s is empty; want a JSON object", where)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badBody("%s is truncated JSON", where)
	case errors.As(err, &syn):
		return badBody("%s is not valid JSON (at byte %d)", where, syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return badBody("%s: got a JSON %s, want an object", where, typ.Value)
		}
		return badBody("%s: field %s: got a JSON %s, want %s", where, quote(field), typ.Value, jsonKind(typ.Type.Kind().String()))
	}
	// encoding/json has no type for unknown fields; its text holds the
	// field name %q-quoted, re-quoted (and shortened) here.
	if q, found := strings.CutPrefix(err.Error(), "json: unknown field "); found {
		if name, err := strconv.Unquote(q); err == nil {
			return badBody("%s: unknown field %s", where, quote(name))
		}
		return badBody("%s: unknown field", where)
	}
	return badBody("%s is not valid JSON", where)
}

func jsonKind(k string) string {
	switch k {
	case "int", "int64", "int32":
		return "an integer"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "slice":
		return "a list"
	}
	return k
}

// cleanPath is net/http's canonical form of a path: path.Clean, keeping a
// trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}
