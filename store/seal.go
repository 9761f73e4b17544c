package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// Sealed values start with a version byte: 0 is plain text (only with
// DISPATCH_INSECURE and no key), 1 is AES-256-GCM: nonce ‖ ciphertext.
const (
	sealPlain byte = 0
	sealGCM   byte = 1
)

// ErrWrongKey means a secret cannot be opened with the configured keys.
// The errors that match it (errors.Is) say which keys were tried and what
// to set; they name the variables, never a key.
var ErrWrongKey = errors.New("store: credential secret cannot be decrypted")

// keyError is an ErrWrongKey that says what to do about it.
type keyError struct {
	problem, remedy string
	where           string // the credentials at fault, when known
}

func (e *keyError) Error() string {
	subject := "credential"
	if e.where != "" {
		subject = e.where + ":"
	}
	return "store: " + subject + " secret " + e.problem + "; " + e.remedy
}

func (e *keyError) Is(target error) bool { return target == ErrWrongKey }

// keyErrorAt returns err naming the credentials at fault (where) if it is
// a keyError; other errors are returned as they are.
func keyErrorAt(err error, where string) error {
	var ke *keyError
	if !errors.As(err, &ke) {
		return err
	}
	named := *ke
	named.where = where
	return &named
}

// wrongKey is the ErrWrongKey for this Sealer's keys.
func (s *Sealer) wrongKey() error {
	switch {
	case s.aead == nil:
		return &keyError{problem: "is encrypted, but no DISPATCH_ENCRYPTION_KEY is set",
			remedy: "set DISPATCH_ENCRYPTION_KEY to the key it was stored with"}
	case s.previous == nil:
		return &keyError{problem: "cannot be decrypted with DISPATCH_ENCRYPTION_KEY (wrong key?)",
			remedy: "if the key was changed, set the old one as DISPATCH_ENCRYPTION_KEY_PREVIOUS and run `dispatch rekey`"}
	default:
		return &keyError{problem: "cannot be decrypted with DISPATCH_ENCRYPTION_KEY nor DISPATCH_ENCRYPTION_KEY_PREVIOUS (wrong key?)",
			remedy: "set DISPATCH_ENCRYPTION_KEY_PREVIOUS (or DISPATCH_ENCRYPTION_KEY) to the key it was stored with"}
	}
}

// Sealer encrypts credential secrets at rest with AES-256-GCM. The
// additional data binds each ciphertext to its row and column, so a sealed
// value copied elsewhere does not open.
type Sealer struct {
	aead     cipher.AEAD // nil: store plain text
	previous cipher.AEAD // opens values sealed under the previous key (rekey)
}

// NewSealer returns a Sealer for a 32-byte key; a nil key stores plain text
// (insecure local use). previous may be nil.
func NewSealer(key, previous []byte) (*Sealer, error) {
	s := &Sealer{}
	var err error
	if key != nil {
		if s.aead, err = newGCM(key); err != nil {
			return nil, err
		}
	}
	if previous != nil {
		if s.previous, err = newGCM(previous); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("store: encryption key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Encrypts reports whether values are encrypted.
func (s *Sealer) Encrypts() bool { return s.aead != nil }

// Seal encrypts plain for the given context (row and column).
func (s *Sealer) Seal(plain, context string) ([]byte, error) {
	if s.aead == nil {
		return append([]byte{sealPlain}, plain...), nil
	}
	nonce := make([]byte, s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{sealGCM}, nonce...)
	return s.aead.Seal(out, nonce, []byte(plain), []byte(context)), nil
}

// ErrUnencrypted means a secret was stored in plain text (DISPATCH_INSECURE
// without a key) and a key is configured now; `dispatch rekey` encrypts it.
var ErrUnencrypted = errors.New("store: a credential secret is stored unencrypted; run `dispatch rekey` with DISPATCH_ENCRYPTION_KEY set to encrypt it")

// Open decrypts a sealed value, trying the previous key after the current.
// With a key configured it refuses plain-text values: one written into the
// table behind dispatch's back must not become a signing secret.
func (s *Sealer) Open(sealed []byte, context string) (string, error) {
	return s.open(sealed, context, false)
}

// open is Open; allowPlain also accepts plain-text values, for Reseal,
// which is how they get encrypted.
func (s *Sealer) open(sealed []byte, context string, allowPlain bool) (string, error) {
	if len(sealed) == 0 {
		return "", s.wrongKey()
	}
	switch sealed[0] {
	case sealPlain:
		if s.aead != nil && !allowPlain {
			return "", ErrUnencrypted
		}
		return string(sealed[1:]), nil
	case sealGCM:
		for _, aead := range []cipher.AEAD{s.aead, s.previous} {
			if aead == nil || len(sealed) < 1+aead.NonceSize() {
				continue
			}
			nonce, ct := sealed[1:1+aead.NonceSize()], sealed[1+aead.NonceSize():]
			if plain, err := aead.Open(nil, nonce, ct, []byte(context)); err == nil {
				return string(plain), nil
			}
		}
	}
	return "", s.wrongKey()
}

// NeedsReseal reports whether a value is not sealed under the current key.
func (s *Sealer) NeedsReseal(sealed []byte, context string) bool {
	if len(sealed) == 0 {
		return false
	}
	if s.aead == nil {
		return sealed[0] != sealPlain
	}
	if sealed[0] != sealGCM || len(sealed) < 1+s.aead.NonceSize() {
		return true
	}
	nonce, ct := sealed[1:1+s.aead.NonceSize()], sealed[1+s.aead.NonceSize():]
	_, err := s.aead.Open(nil, nonce, ct, []byte(context))
	return err != nil
}
