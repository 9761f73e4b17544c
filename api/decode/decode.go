// Package decode reads the API's request bodies into the domain's values:
// creates and batches of jobs, subscriptions and their patches, events,
// alert destinations, and the small objects of the other routes. What those
// values must be is the domain's (dispatch.JobRules.CheckTarget,
// dispatch.CheckHeaders, ...): the decoders apply those rules as they read
// each field and answer every problem at once, as one dispatch.Problems
// error. Unknown fields, duplicate keys, wrong types and invalid UTF-8 are
// problems too.
//
// It imports only the standard library, the domain and the JSON token
// reader, so that its tests and fuzz targets build quickly.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/dispatchhq/dispatch"
)

// reader is a jsontext decoder over a byte slice, kept in a pool: a
// create made three (its body, headers and metadata), and a decoder's
// state was a fifth of the bytes a create's parse allocated.
type reader struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var readers = sync.Pool{New: func() any { return new(reader) }}

// Duplicate names are let through to be named as problems, and escaped
// lone surrogates to be read as U+FFFD (unquote), as encoding/json reads
// them; raw invalid UTF-8 is refused before a read.
var readOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// read returns a pooled decoder reading b in place; release gives it back.
func read(b []byte) *reader {
	r := readers.Get().(*reader)
	r.buf = *bytes.NewBuffer(b)
	r.dec.Reset(&r.buf, readOptions...)
	return r
}

// release returns r to the pool, holding on to nothing it read.
func (r *reader) release() {
	r.buf = bytes.Buffer{}
	r.dec.Reset(&r.buf)
	readers.Put(r)
}

// eachField calls field with each name and value of the JSON object body,
// in order, each value a slice of body; ok is false, and p says why, when
// body is not a JSON object: invalid UTF-8 or JSON, or data after it.
func eachField(body []byte, field func(name string, value json.RawMessage)) (p dispatch.Problems, ok bool) {
	if !utf8.Valid(body) {
		p.Add("body", "is not valid UTF-8")
		return p, false
	}
	r := read(body)
	defer r.release()
	dec := &r.dec
	tok, err := dec.ReadToken()
	if err != nil || tok.Kind() != '{' {
		p.Add("body", "must be a JSON object")
		return p, false
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken() // a name, or the error that the object ends badly
		if err != nil {
			p.Add("body", "is not valid JSON: %s", jsonErrText(err))
			return p, false
		}
		name := tok.String()
		v, err := dec.ReadValue()
		if err != nil {
			p.Add("body", "is not valid JSON: %s", jsonErrText(err))
			return p, false
		}
		end := dec.InputOffset()
		field(name, json.RawMessage(body[end-int64(len(v)):end:end]))
	}
	if _, err := dec.ReadToken(); err != nil {
		p.Add("body", "is not valid JSON: %s", jsonErrText(err))
		return p, false
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		p.Add("body", "has data after the JSON object")
		return p, false
	}
	return p, true
}

// objectHint is the room a decoded object's map starts with: enough for a
// create's fields, so that the map is made once, not grown.
const objectHint = 16

// decodeObject splits a JSON object into its fields, refusing invalid UTF-8,
// duplicate keys and trailing data. A nil map means the body is unusable.
// The field values are slices of body.
//
// It reads with jsontext, the token reader of the JSON v2 work: its values
// come without encoding/json's Decoder allocating a syntax error per value
// to find the value's end, which made this a third of a create's parsing.
func decodeObject(body []byte) (map[string]json.RawMessage, dispatch.Problems) {
	fields := make(map[string]json.RawMessage, objectHint)
	p, ok := decodeInto(fields, body)
	if !ok {
		return nil, p
	}
	return fields, p
}

// decodeInto is decodeObject into fields, which it clears first: a batch
// decodes each of its items into one map instead of a map an item (a
// seventh of a batch's allocations). ok is false when body is unusable.
func decodeInto(fields map[string]json.RawMessage, body []byte) (dispatch.Problems, bool) {
	clear(fields)
	var dups dispatch.Problems
	p, ok := eachField(body, func(name string, v json.RawMessage) {
		if _, dup := fields[name]; dup {
			dups.Add(name, "appears more than once")
			return
		}
		fields[name] = v
	})
	if !ok {
		return p, false
	}
	return append(p, dups...), true
}

// splitArray splits a JSON array that decodeObject has checked already
// into its elements, each a slice of raw; null is an empty array. ok is
// false when raw is not an array. One pass of jsontext: encoding/json's
// Unmarshal into []json.RawMessage scanned the batch twice more, a
// quarter of a batch's parsing.
func splitArray(raw json.RawMessage) (items []json.RawMessage, ok bool) {
	r := read(raw)
	defer r.release()
	dec := &r.dec
	tok, err := dec.ReadToken()
	switch {
	case err != nil:
		return nil, false
	case tok.Kind() == 'n':
		return nil, true
	case tok.Kind() != '[':
		return nil, false
	}
	for dec.PeekKind() != ']' {
		v, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		end := dec.InputOffset()
		items = append(items, raw[end-int64(len(v)):end:end])
	}
	return items, true
}

func jsonErrText(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of input"
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return strings.TrimPrefix(se.Error(), "jsontext: ")
	}
	return "malformed"
}

// unquote decodes a JSON string value; ok is false when raw is not one.
// raw is a value decodeObject checked, so a quoted run without escapes is
// the string itself.
func unquote(raw []byte) (s string, ok bool) {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	if b, err := jsontext.AppendUnquote(nil, raw); err == nil {
		return string(b), true
	}
	// What jsontext refuses but encoding/json takes (an escaped lone
	// surrogate, read as U+FFFD) is taken as before.
	return s, json.Unmarshal(raw, &s) == nil
}

// fieldDecoder decodes typed fields out of a raw object, noting problems.
type fieldDecoder struct {
	fields map[string]json.RawMessage
	p      *dispatch.Problems
}

func (d fieldDecoder) present(name string) bool {
	v, ok := d.fields[name]
	return ok && string(v) != "null"
}

func (d fieldDecoder) str(name string, maxLen int, required bool) string {
	if !d.present(name) {
		if required {
			d.p.Add(name, "is required")
		}
		return ""
	}
	s, ok := unquote(d.fields[name])
	if !ok {
		d.p.Add(name, "must be a string")
		return ""
	}
	switch {
	case required && strings.TrimSpace(s) == "":
		d.p.Add(name, "must not be empty")
	case utf8.RuneCountInString(s) > maxLen:
		d.p.Add(name, "must be at most %d characters", maxLen)
	case strings.ContainsAny(s, "\x00"):
		d.p.Add(name, "must not contain NUL characters")
	}
	return s
}

func (d fieldDecoder) stringMap(name string) map[string]string {
	if !d.present(name) {
		return nil
	}
	// One pass straight into the map: a bad value is kept as "" so that a
	// name given twice is named whatever its first value was.
	m := map[string]string{}
	var problems dispatch.Problems
	_, ok := eachField(d.fields[name], func(k string, raw json.RawMessage) {
		if _, dup := m[k]; dup {
			problems.Add(name+"."+k, "appears more than once")
			return
		}
		s, ok := unquote(raw)
		if !ok {
			problems.Add(name+"."+k, "must be a string")
		}
		m[k] = s
	})
	if !ok {
		d.p.Add(name, "must be an object of string values")
		return nil
	}
	*d.p = append(*d.p, problems...)
	return m
}

func (d fieldDecoder) time(name string) *time.Time {
	s := d.str(name, 64, false)
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d.p.Add(name, "must be an RFC 3339 time such as 2025-10-04T15:00:00Z")
		return nil
	}
	t = t.UTC()
	return &t
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// addUnknown adds an "unknown field" problem for each field that known
// does not hold, in name order. The names are sorted only when one is
// unknown: a body that is right, the usual case, costs a map lookup a
// field.
func addUnknown(p *dispatch.Problems, fields map[string]json.RawMessage, known map[string]bool) {
	unknown := false
	for k := range fields {
		if !known[k] {
			unknown = true
			break
		}
	}
	if !unknown {
		return
	}
	for _, k := range sortedKeys(fields) {
		if !known[k] {
			p.Add(k, "unknown field")
		}
	}
}

// Fields reads typed fields out of a JSON object body, collecting every
// problem (unknown fields, wrong types, bad lengths) for one answer.
type Fields struct {
	d fieldDecoder
	p dispatch.Problems
}

// Object decodes body as a JSON object whose fields must be among
// known. The error is set only when the body is unusable as a whole; an
// empty body is an empty object.
func Object(body []byte, known ...string) (*Fields, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, p.Err()
	}
	f := &Fields{p: p}
	f.d = fieldDecoder{fields: fields, p: &f.p}
	allowed := map[string]bool{}
	for _, k := range known {
		allowed[k] = true
	}
	addUnknown(&f.p, fields, allowed)
	return f, nil
}

// String returns a string field ("" when absent), noting problems.
func (f *Fields) String(name string, maxLen int, required bool) string {
	return f.d.str(name, maxLen, required)
}

// Has reports whether a field is present and not null.
func (f *Fields) Has(name string) bool { return f.d.present(name) }

// Add notes a problem with a field.
func (f *Fields) Add(field, format string, args ...any) { f.p.Add(field, format, args...) }

// Err returns every problem noted, or nil.
func (f *Fields) Err() error { return f.p.Err() }

// AllowedTargets reads a JSON array of allowedTargets entries, validating
// and normalising each (dispatch.ParseAllowedTarget) and noting every bad entry as
// a problem of name[i]. Duplicates (after normalising) are kept once.
func (f *Fields) AllowedTargets(name string) []string {
	raw, ok := f.d.fields[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		f.p.Add(name, "must be an array of origins such as \"https://partner.example\", each optionally followed by a path prefix")
		return nil
	}
	if len(items) > dispatch.MaxAllowedTargets {
		f.p.Add(name, "holds %d entries; at most %d are allowed", len(items), dispatch.MaxAllowedTargets)
		return nil
	}
	out := make([]string, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		field := name + "[" + strconv.Itoa(i) + "]"
		s, ok := unquote(item)
		if !ok {
			f.p.Add(field, "must be a string")
			continue
		}
		n, err := dispatch.ParseAllowedTarget(s)
		if err != nil {
			f.p.Add(field, "%s", err.Error())
			continue
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
