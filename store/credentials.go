package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
		INSERT INTO dispatch_credentials (id, name, bearer_token, signing_secret, algorithm, signature_scheme, allowed_targets, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)`, c.ID, c.Name, bearer, secret, c.Algorithm, c.SignatureScheme, targetsOrEmpty(c.AllowedTargets), now)
	if err != nil {
		return fmt.Errorf("store: create credentials: %w", interpret(err))
	}
	return nil
}

// GetCredentials returns credentials with their secrets opened, from the
// cache when it has them.
func (s *Store) GetCredentials(ctx context.Context, id int64) (dispatch.Credentials, error) {
	key := strconv.FormatInt(id, 10)
	cached := !s.credsWatched.Load() || s.credsLive.Load()
	if c, ok := s.creds.Get(key); ok && cached {
		return c.(dispatch.Credentials), nil
	}
	s.credsMu.Lock()
	gen := s.credsGen
	s.credsMu.Unlock()
	c, err := s.readCredentials(ctx, s.pool, id, "")
	if err != nil {
		return c, err
	}
	if s.afterCredentialsRead != nil {
		s.afterCredentialsRead()
	}
	s.credsMu.Lock()
	if s.credsGen == gen && cached { // no invalidation since the read began
		s.creds.SetDefault(key, c)
	}
	s.credsMu.Unlock()
	return c, nil
}

// invalidateCredentials drops id from the cache (all entries when id is 0)
// after a change has committed, and stops every cache miss already reading
// from storing its possibly older copy.
func (s *Store) invalidateCredentials(id int64) {
	s.credsMu.Lock()
	defer s.credsMu.Unlock()
	s.credsGen++
	if id == 0 {
		s.creds.Flush()
		return
	}
	s.creds.Delete(strconv.FormatInt(id, 10))
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

const credentialsColumns = `id, name, bearer_token, signing_secret, previous_secrets, previous_expires, algorithm,
	signature_scheme, allowed_targets, created_at, updated_at`

func (s *Store) scanCredentials(row pgx.Row) (dispatch.Credentials, error) {
	var (
		c              dispatch.Credentials
		bearer, secret []byte
		previous       [][]byte
		expires        []time.Time
	)
	err := row.Scan(&c.ID, &c.Name, &bearer, &secret, &previous,
		&expires, &c.Algorithm, &c.SignatureScheme, &c.AllowedTargets, &c.CreatedAt, &c.UpdatedAt)
	if err != nil {
		return c, err
	}
	if c.BearerToken, err = s.openOpt(c.ID, "bearer_token", bearer); err != nil {
		return c, err
	}
	if c.SigningSecret, err = s.openOpt(c.ID, "signing_secret", secret); err != nil {
		return c, err
	}
	if len(previous) != len(expires) {
		return c, fmt.Errorf("store: credentials %d: %d previous secrets but %d expiries", c.ID, len(previous), len(expires))
	}
	for i, sealed := range previous {
		p, err := s.openOpt(c.ID, "previous_secret", sealed)
		if err != nil {
			return c, err
		}
		c.Previous = append(c.Previous, dispatch.PreviousSecret{Secret: p, ExpiresAt: expires[i]})
	}
	return c, nil
}

// credentialsInfoColumns are what a dispatch.CredentialsInfo shows: no
// sealed value, so reading them needs no key.
const credentialsInfoColumns = `id, name, algorithm, signature_scheme, bearer_token IS NOT NULL,
	allowed_targets, previous_expires, created_at, updated_at`

func scanCredentialsInfo(row pgx.Row) (dispatch.CredentialsInfo, error) {
	var c dispatch.CredentialsInfo
	err := row.Scan(&c.ID, &c.Name, &c.Algorithm, &c.SignatureScheme, &c.HasBearerToken,
		&c.AllowedTargets, &c.PreviousExpires, &c.CreatedAt, &c.UpdatedAt)
	return c, err
}

// GetCredentialsInfo returns credentials as the API shows them, opening
// no secret: a process without their key reads them like the others.
func (s *Store) GetCredentialsInfo(ctx context.Context, id int64) (dispatch.CredentialsInfo, error) {
	c, err := scanCredentialsInfo(s.pool.QueryRow(ctx, `SELECT `+credentialsInfoColumns+` FROM dispatch_credentials WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, notFound("credentials", id)
	}
	if err != nil {
		return c, fmt.Errorf("store: get credentials %d: %w", id, err)
	}
	return c, nil
}

// ListCredentials returns one page of credentials, newest first, and the
// total. It opens no secret (the list shows none): credentials sealed under
// a key this process lacks are listed like the others.
func (s *Store) ListCredentials(ctx context.Context, page, size int) ([]dispatch.CredentialsInfo, int, error) {
	out, total, err := newestPage(ctx, s, "dispatch_credentials", credentialsInfoColumns, "", nil, page, size,
		func(r pgx.CollectableRow) (dispatch.CredentialsInfo, error) { return scanCredentialsInfo(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("store: list credentials: %w", err)
	}
	return out, total, nil
}

// DeleteCredentials removes credentials; jobs that refer to them fail with
// a clear lastError when they are processed. Credentials an alert
// destination signs with are refused (EConflict): its alerts could not be
// sent, and a failed alert raises none.
func (s *Store) DeleteCredentials(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM dispatch_credentials WHERE id = $1`, id)
	s.invalidateCredentials(id)
	if pgCode(err) == foreignKeyViolation {
		var names []string
		rows, qerr := s.pool.Query(ctx, `SELECT name FROM dispatch_alert_destination WHERE credentials_id = $1 ORDER BY name`, id)
		if qerr == nil {
			names, qerr = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if qerr != nil || len(names) == 0 {
			names = []string{"an alert destination"}
		}
		return dispatch.Errorf(dispatch.EConflict,
			"credentials %d sign the alerts to %s: delete the destination first (DELETE /api/admin/dispatch/alerts/destinations/{id}), or its alerts could not be sent",
			id, strings.Join(names, ", "))
	}
	if err != nil {
		return fmt.Errorf("store: delete credentials %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("credentials", id)
	}
	return nil
}

// SetCredentialsTargets replaces the targets the credentials may be sent to
// (entries as dispatch.ParseAllowedTarget returns them; none: nowhere). Jobs
// already created for a target no longer allowed are not sent with them:
// the processor finishes them as ERROR. This replica's cache is invalidated
// at once, and every replica's as the change commits (WatchCredentials).
func (s *Store) SetCredentialsTargets(ctx context.Context, id int64, targets []string) (dispatch.CredentialsInfo, error) {
	return s.UpdateCredentials(ctx, id, nil, &targets)
}

// UpdateCredentials changes credentials' name and allowed targets, each
// when not nil, in one statement (SetCredentialsTargets says what a change
// of targets does), and returns them as changed. It opens no secret: the
// change needs no key, and either it is made and answered or it is not made.
func (s *Store) UpdateCredentials(ctx context.Context, id int64, name *string, targets *[]string) (dispatch.CredentialsInfo, error) {
	var newTargets []string
	if targets != nil {
		newTargets = targetsOrEmpty(*targets)
	}
	c, err := scanCredentialsInfo(s.pool.QueryRow(ctx, `
		UPDATE dispatch_credentials SET name = COALESCE($2, name),
			allowed_targets = CASE WHEN $3 THEN $4 ELSE allowed_targets END, updated_at = $5
		WHERE id = $1 RETURNING `+credentialsInfoColumns,
		id, name, targets != nil, newTargets, time.Now().UTC().Truncate(time.Microsecond)))
	s.invalidateCredentials(id)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, notFound("credentials", id)
	}
	if err != nil {
		return c, fmt.Errorf("store: update credentials %d: %w", id, err)
	}
	return c, nil
}

// credentialsUsageQuery counts, for each of a page of credentials, the
// subscriptions that sign with them, their live jobs, and the alert
// destinations that sign with them. The live jobs are
// found through the status index (the backlog, never the finished
// history), at most $2 of them in all.
const credentialsUsageQuery = `
SELECT c.id, COALESCE(s.n, 0), COALESCE(j.n, 0),
	(SELECT count(*) FROM dispatch_alert_destination a WHERE a.credentials_id = c.id)
FROM unnest($1::bigint[]) AS c(id)
LEFT JOIN (
	SELECT credentials_id, count(*) AS n FROM dispatch_subscription
	WHERE credentials_id = ANY($1) GROUP BY credentials_id) s ON s.credentials_id = c.id
LEFT JOIN (
	SELECT credentials_id, count(*) AS n FROM (
		SELECT credentials_id FROM dispatch_job
		WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND credentials_id = ANY($1)
		LIMIT $2) live
	GROUP BY credentials_id) j ON j.credentials_id = c.id`

// CredentialsUsage reads where each of ids is used
// (dispatch.CredentialsUsage), in one statement.
func (s *Store) CredentialsUsage(ctx context.Context, ids []int64) (map[int64]dispatch.CredentialsUsage, error) {
	out := make(map[int64]dispatch.CredentialsUsage, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	err := s.browse(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, credentialsUsageQuery, ids, dispatch.CountLimit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id int64
				u  dispatch.CredentialsUsage
			)
			if err := rows.Scan(&id, &u.Subscriptions, &u.LiveJobs, &u.AlertDestinations); err != nil {
				return err
			}
			out[id] = u
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("store: credentials usage: %w", err)
	}
	return out, nil
}

// targetsOrEmpty stores no targets as an empty array, not NULL.
func targetsOrEmpty(t []string) []string {
	if t == nil {
		return []string{}
	}
	return t
}

// MaxPreviousSecrets bounds how many replaced secrets may be in their grace
// period at once (each is one more signature on every delivery).
const MaxPreviousSecrets = 10

// RotateCredentials makes newSecret the signing secret and keeps the current
// one valid until now+grace. Secrets replaced by earlier rotations keep
// their own grace period, but none outlives the new one: a rotation with
// grace 0 ends every old secret at once (after a leak). The current secret
// is read from the table under a row lock, not from the cache: a rotation
// another replica made a moment ago, or one running at the same time, must
// not be lost (its new secret would stop verifying at once).
func (s *Store) RotateCredentials(ctx context.Context, id int64, newSecret string, grace time.Duration) (dispatch.Credentials, error) {
	var cur dispatch.Credentials
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		if cur, err = s.readCredentials(ctx, tx, id, "FOR UPDATE"); err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		until := now.Add(grace)
		previous := []dispatch.PreviousSecret{{Secret: cur.SigningSecret, ExpiresAt: until}}
		for _, p := range cur.Previous {
			if p.ExpiresAt.After(until) {
				p.ExpiresAt = until
			}
			previous = append(previous, p)
		}
		var (
			live    []dispatch.PreviousSecret
			sealed  = [][]byte{} // empty arrays, not NULL
			expires = []time.Time{}
		)
		for _, p := range previous {
			if !p.ExpiresAt.After(now) {
				continue // its grace period is over: forget it
			}
			b, err := s.sealOpt(id, "previous_secret", p.Secret)
			if err != nil {
				return err
			}
			live, sealed, expires = append(live, p), append(sealed, b), append(expires, p.ExpiresAt)
		}
		if len(live) > MaxPreviousSecrets {
			return dispatch.Errorf(dispatch.EConflict, "credentials %d already have %d old secrets in their grace period; wait until one ends, or rotate with gracePeriod 0s to end them all",
				id, len(live)-1)
		}
		secret, err := s.sealOpt(id, "signing_secret", newSecret)
		if err != nil {
			return err
		}
		// The bearer token is sealed again too, under the same key as the
		// secrets: one credential never needs two keys.
		bearer, err := s.sealOpt(id, "bearer_token", cur.BearerToken)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			UPDATE dispatch_credentials SET signing_secret = $2, previous_secrets = $3,
				previous_expires = $4, updated_at = $5, bearer_token = $6
			WHERE id = $1`, id, secret, sealed, expires, now, bearer); err != nil {
			return fmt.Errorf("store: rotate credentials %d: %w", id, err)
		}
		cur.Previous = live
		cur.SigningSecret, cur.UpdatedAt = newSecret, now
		return nil
	})
	s.invalidateCredentials(id)
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
		rows, err := tx.Query(ctx, `SELECT id, bearer_token, signing_secret, previous_secrets FROM dispatch_credentials FOR UPDATE`)
		if err != nil {
			return err
		}
		type row struct {
			id       int64
			vals     [2][]byte
			previous [][]byte
		}
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.vals[0], &x.vals[1], &x.previous)
		})
		if err != nil {
			return err
		}
		// reseal returns v sealed under the current key, or nil when it
		// already is. Plain-text values (written without a key, in
		// insecure mode) are opened too: encrypting them is what rekey is for.
		reseal := func(id int64, col string, v []byte) ([]byte, error) {
			if v == nil || !s.sealer.NeedsReseal(v, sealContext(id, col)) {
				return nil, nil
			}
			plain, err := s.sealer.open(v, sealContext(id, col), true)
			if err != nil {
				return nil, keyErrorAt(err, fmt.Sprintf("credentials %d (%s)", id, col))
			}
			return s.sealOpt(id, col, plain)
		}
		columns := [2]string{"bearer_token", "signing_secret"}
		for _, x := range all {
			for i, col := range columns {
				sealed, err := reseal(x.id, col, x.vals[i])
				if err != nil || sealed == nil {
					if err != nil {
						return err
					}
					continue
				}
				if _, err := tx.Exec(ctx, `UPDATE dispatch_credentials SET `+col+` = $2 WHERE id = $1`, x.id, sealed); err != nil {
					return err
				}
				n++
			}
			changed := false
			for i, v := range x.previous {
				sealed, err := reseal(x.id, "previous_secret", v)
				if err != nil {
					return err
				}
				if sealed != nil {
					x.previous[i], changed = sealed, true
					n++
				}
			}
			if changed {
				if _, err := tx.Exec(ctx, `UPDATE dispatch_credentials SET previous_secrets = $2 WHERE id = $1`, x.id, x.previous); err != nil {
					return err
				}
			}
		}
		return nil
	})
	s.invalidateCredentials(0)
	if errors.Is(err, ErrWrongKey) {
		return 0, err // it says which credentials, and what to set
	}
	if err != nil {
		return 0, fmt.Errorf("store: reseal: %w", err)
	}
	return n, nil
}

// NeedingReseal counts the stored secret values not sealed under the
// current key: after a key change, those that still need
// DISPATCH_ENCRYPTION_KEY_PREVIOUS (`dispatch rekey` reseals them). Once
// it is 0, and no replica seals with the old key any more, the previous
// key can be dropped.
func (s *Store) NeedingReseal(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, bearer_token, signing_secret, previous_secrets FROM dispatch_credentials`)
	if err != nil {
		return 0, fmt.Errorf("store: count secrets needing reseal: %w", err)
	}
	var (
		id             int64
		bearer, secret []byte
		previous       [][]byte
		n              int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &bearer, &secret, &previous}, func() error {
		if s.sealer.NeedsReseal(bearer, sealContext(id, "bearer_token")) {
			n++
		}
		if s.sealer.NeedsReseal(secret, sealContext(id, "signing_secret")) {
			n++
		}
		for _, p := range previous {
			if s.sealer.NeedsReseal(p, sealContext(id, "previous_secret")) {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: count secrets needing reseal: %w", err)
	}
	return n, nil
}

// CheckKey opens every stored secret (the bearer token, the signing
// secret and the previous ones of a rotation), so a wrong or missing key
// (DISPATCH_ENCRYPTION_KEY, or the _PREVIOUS one values sealed before a
// key change still need) is a start-up error rather than failed
// deliveries later. A rotation before this release resealed the secrets
// but not the bearer token: such a credential may still need the earlier
// key. Opening one is a microsecond.
func (s *Store) CheckKey(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT id, bearer_token, signing_secret, previous_secrets FROM dispatch_credentials ORDER BY id DESC`)
	if err != nil {
		return fmt.Errorf("store: check encryption key: %w", err)
	}
	var (
		id, first      int64
		bearer, secret []byte
		previous       [][]byte
		failed         int
		firstErr       error
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &bearer, &secret, &previous}, func() error {
		_, err := s.sealer.Open(secret, sealContext(id, "signing_secret"))
		if err == nil {
			_, err = s.openOpt(id, "bearer_token", bearer)
		}
		for _, p := range previous {
			if err == nil {
				_, err = s.openOpt(id, "previous_secret", p)
			}
		}
		if err != nil {
			if failed++; failed == 1 {
				first, firstErr = id, err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: check encryption key: %w", err)
	}
	if failed == 0 {
		return nil
	}
	where := fmt.Sprintf("credentials %d", first)
	if failed > 1 {
		where = fmt.Sprintf("credentials %d, and %d more", first, failed-1)
	}
	if errors.Is(firstErr, ErrWrongKey) {
		return keyErrorAt(firstErr, where)
	}
	return fmt.Errorf("%w (%s)", firstErr, where)
}

// checkCredentials reports a missing credentials id as a field problem,
// and credentials that may not be sent to target (their allowedTargets) as
// EUnprocessable.
func (s *Store) checkCredentials(ctx context.Context, id int64, target string) error {
	if id == 0 {
		return nil
	}
	c, err := s.GetCredentials(ctx, id)
	if err != nil {
		if dispatch.ErrorCode(err) == dispatch.ENotFound {
			var p dispatch.Problems
			p.Add("credentialsId", "credentials %d do not exist", id)
			return p.Err()
		}
		return fmt.Errorf("store: check credentials: %w", err)
	}
	return c.CheckTarget(target)
}
