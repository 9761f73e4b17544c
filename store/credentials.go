package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// sealContext binds a sealed value to its row and column.
func sealContext(id int64, column string) string {
	return "dispatch_credentials:" + strconv.FormatInt(id, 10) + ":" + column
}

func (s *Store) sealOpt(id int64, column, plain string) ([]byte, error) {
	if plain == "" {
		return nil, nil
	}
	return s.sealer.Seal(plain, sealContext(id, column))
}

func (s *Store) openOpt(id int64, column string, sealed []byte) (string, error) {
	if sealed == nil {
		return "", nil
	}
	return s.sealer.Open(sealed, sealContext(id, column))
}

// CreateCredentials stores new credentials (id and times are set here).
func (s *Store) CreateCredentials(ctx context.Context, c *dispatch.Credentials) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	c.ID, c.CreatedAt, c.UpdatedAt = s.NewID(), now, now
	bearer, err := s.sealOpt(c.ID, "bearer_token", c.BearerToken)
	if err != nil {
		return err
	}
	secret, err := s.sealOpt(c.ID, "signing_secret", c.SigningSecret)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `
		INSERT INTO dispatch_credentials (id, bearer_token, signing_secret, algorithm, signature_scheme, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)`, c.ID, bearer, secret, c.Algorithm, c.SignatureScheme, now)
	if err != nil {
		return fmt.Errorf("store: create credentials: %w", interpret(err))
	}
	return nil
}

// GetCredentials returns credentials with their secrets opened, from the
// cache when it has them.
func (s *Store) GetCredentials(ctx context.Context, id int64) (dispatch.Credentials, error) {
	key := strconv.FormatInt(id, 10)
	if c, ok := s.creds.Get(key); ok {
		return c.(dispatch.Credentials), nil
	}
	c, err := s.readCredentials(ctx, s.pool, id, "")
	if err != nil {
		return c, err
	}
	s.creds.SetDefault(key, c)
	return c, nil
}

// readCredentials reads credentials from the table (never the cache) and
// opens their secrets; lock is appended to the query ("FOR UPDATE").
func (s *Store) readCredentials(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int64, lock string) (dispatch.Credentials, error) {
	c, err := s.scanCredentials(q.QueryRow(ctx, `SELECT `+credentialsColumns+`
		FROM dispatch_credentials WHERE id = $1 `+lock, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, notFound("credentials", id)
	}
	if err != nil {
		return c, fmt.Errorf("store: get credentials %d: %w", id, err)
	}
	return c, nil
}

const credentialsColumns = `id, bearer_token, signing_secret, previous_secret, previous_expires_at, algorithm,
	signature_scheme, created_at, updated_at`

func (s *Store) scanCredentials(row pgx.Row) (dispatch.Credentials, error) {
	var (
		c                        dispatch.Credentials
		bearer, secret, previous []byte
	)
	err := row.Scan(&c.ID, &bearer, &secret, &previous,
		&c.PreviousExpiresAt, &c.Algorithm, &c.SignatureScheme, &c.CreatedAt, &c.UpdatedAt)
	if err != nil {
		return c, err
	}
	if c.BearerToken, err = s.openOpt(c.ID, "bearer_token", bearer); err != nil {
		return c, err
	}
	if c.SigningSecret, err = s.openOpt(c.ID, "signing_secret", secret); err != nil {
		return c, err
	}
	if c.PreviousSecret, err = s.openOpt(c.ID, "previous_secret", previous); err != nil {
		return c, err
	}
	return c, nil
}

// ListCredentials returns one page of credentials, newest first, and the
// total. Secrets are opened like GetCredentials'; callers show none.
func (s *Store) ListCredentials(ctx context.Context, page, size int) ([]dispatch.Credentials, int, error) {
	var total int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dispatch_credentials`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("store: count credentials: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+credentialsColumns+` FROM dispatch_credentials
		ORDER BY id DESC LIMIT $1 OFFSET $2`, size, page*size)
	if err != nil {
		return nil, 0, fmt.Errorf("store: list credentials: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.Credentials, error) { return s.scanCredentials(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("store: list credentials: %w", err)
	}
	return out, total, nil
}

// DeleteCredentials removes credentials; jobs that refer to them fail with
// a clear lastError when they are processed.
func (s *Store) DeleteCredentials(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM dispatch_credentials WHERE id = $1`, id)
	s.creds.Delete(strconv.FormatInt(id, 10))
	if err != nil {
		return fmt.Errorf("store: delete credentials %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("credentials", id)
	}
	return nil
}

// RotateCredentials makes newSecret the signing secret and keeps the current
// one valid until now+grace. The current secret is read from the table
// under a row lock, not from the cache: a rotation another replica made a
// moment ago, or one running at the same time, must not be lost (its new
// secret would stop verifying at once, with no grace period).
func (s *Store) RotateCredentials(ctx context.Context, id int64, newSecret string, grace time.Duration) (dispatch.Credentials, error) {
	var cur dispatch.Credentials
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		if cur, err = s.readCredentials(ctx, tx, id, "FOR UPDATE"); err != nil {
			return err
		}
		secret, err := s.sealOpt(id, "signing_secret", newSecret)
		if err != nil {
			return err
		}
		previous, err := s.sealOpt(id, "previous_secret", cur.SigningSecret)
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		until := now.Add(grace)
		if _, err := tx.Exec(ctx, `
			UPDATE dispatch_credentials SET signing_secret = $2, previous_secret = $3,
				previous_expires_at = $4, updated_at = $5
			WHERE id = $1`, id, secret, previous, until, now); err != nil {
			return fmt.Errorf("store: rotate credentials %d: %w", id, err)
		}
		cur.PreviousSecret, cur.PreviousExpiresAt = cur.SigningSecret, &until
		cur.SigningSecret, cur.UpdatedAt = newSecret, now
		return nil
	})
	s.creds.Delete(strconv.FormatInt(id, 10))
	return cur, err
}

// Reseal re-encrypts every credential secret under the current key (after
// DISPATCH_ENCRYPTION_KEY changed, with the old one as
// DISPATCH_ENCRYPTION_KEY_PREVIOUS), and encrypts values stored in plain
// text while no key was set (DISPATCH_INSECURE). It returns how many values
// it rewrote; any value it cannot open fails the whole run, changing nothing.
func (s *Store) Reseal(ctx context.Context) (int, error) {
	n := 0
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, bearer_token, signing_secret, previous_secret FROM dispatch_credentials FOR UPDATE`)
		if err != nil {
			return err
		}
		type row struct {
			id   int64
			vals [3][]byte
		}
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.vals[0], &x.vals[1], &x.vals[2])
		})
		if err != nil {
			return err
		}
		columns := [3]string{"bearer_token", "signing_secret", "previous_secret"}
		for _, x := range all {
			for i, col := range columns {
				if x.vals[i] == nil || !s.sealer.NeedsReseal(x.vals[i], sealContext(x.id, col)) {
					continue
				}
				// Plain-text values (written without a key, in insecure
				// mode) are opened too: encrypting them is what rekey is for.
				plain, err := s.sealer.open(x.vals[i], sealContext(x.id, col), true)
				if err != nil {
					return fmt.Errorf("credentials %d %s: %w", x.id, col, err)
				}
				sealed, err := s.sealOpt(x.id, col, plain)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `UPDATE dispatch_credentials SET `+col+` = $2 WHERE id = $1`, x.id, sealed); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	s.creds.Flush()
	if err != nil {
		return 0, fmt.Errorf("store: reseal: %w", err)
	}
	return n, nil
}

// CheckKey opens one stored secret, so a wrong DISPATCH_ENCRYPTION_KEY is a
// start-up error rather than failed deliveries later.
func (s *Store) CheckKey(ctx context.Context) error {
	var (
		id     int64
		secret []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT id, signing_secret FROM dispatch_credentials ORDER BY id DESC LIMIT 1`).Scan(&id, &secret)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: check encryption key: %w", err)
	}
	if _, err := s.sealer.Open(secret, sealContext(id, "signing_secret")); err != nil {
		return fmt.Errorf("%w (credentials %d)", err, id)
	}
	return nil
}
