package store

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"sync"
)

// A job's payload is stored once, in dispatch_payload, as a body: one
// format byte and the data. Payloads of a few hundred bytes and more are
// DEFLATE-compressed when that saves a quarter or more: JSON webhooks
// shrink two to four times, and PostgreSQL compresses nothing under about
// 2 KB itself. The body is opened on read; the API never sees it.
const (
	bodyRaw     = 0
	bodyDeflate = 1
)

// packMin is the smallest payload worth compressing.
const packMin = 256

var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed)
	return w
}}

// packPayload returns the stored body of a payload.
func packPayload(payload string) []byte {
	if len(payload) >= packMin {
		var buf bytes.Buffer
		buf.Grow(len(payload)/2 + 16)
		buf.WriteByte(bodyDeflate)
		w := deflaters.Get().(*flate.Writer)
		w.Reset(&buf)
		_, err := io.WriteString(w, payload)
		if err == nil {
			err = w.Close()
		}
		deflaters.Put(w)
		if err == nil && buf.Len() <= len(payload)*3/4 {
			return buf.Bytes()
		}
	}
	out := make([]byte, 1+len(payload))
	out[0] = bodyRaw
	copy(out[1:], payload)
	return out
}

// maxPayloadBody bounds what a stored body may open to (the API refuses
// payloads above its own, smaller limit).
const maxPayloadBody = 64 << 20

// openPayload returns the payload a stored body holds.
func openPayload(body []byte) (string, error) {
	if len(body) == 0 {
		return "", errors.New("store: empty payload body")
	}
	switch body[0] {
	case bodyRaw:
		return string(body[1:]), nil
	case bodyDeflate:
		r := flate.NewReader(bytes.NewReader(body[1:]))
		defer r.Close()
		var buf bytes.Buffer
		buf.Grow(3 * len(body))
		if _, err := io.Copy(&buf, io.LimitReader(r, maxPayloadBody+1)); err != nil {
			return "", fmt.Errorf("store: open payload: %w", err)
		}
		if buf.Len() > maxPayloadBody {
			return "", errors.New("store: payload body opens past its limit")
		}
		return buf.String(), nil
	default:
		return "", fmt.Errorf("store: payload body of unknown format %d", body[0])
	}
}
