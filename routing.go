package dispatch

import (
	"slices"
	"strings"
	"sync"
)

// Routing is what a job may name: the queues and processing pools of the
// deployment's router configuration. The API refuses a job (or a
// subscription) naming any other. It is safe for concurrent use, and Set
// replaces it when the configuration is read again.
type Routing struct {
	mu     sync.RWMutex
	queues []RouteQueue
	pools  []string
}

// RouteQueue is a configured queue as a job names it.
type RouteQueue struct {
	// Key is what a job that names the queue stores: the configured URL,
	// or the name of a queue configured by name.
	Key string
	// Name is the queue's name (the last segment of its URL).
	Name string
	// ByName: configured by name, so any queue URL ending in /Name names
	// it (the URL is SQS's to say).
	ByName bool
}

// NewRouting returns the routing of queues (the default first) and pools.
func NewRouting(queues []RouteQueue, pools []string) *Routing {
	r := &Routing{}
	r.Set(queues, pools)
	return r
}

// Set replaces the queues and pools.
func (r *Routing) Set(queues []RouteQueue, pools []string) {
	r.mu.Lock()
	r.queues, r.pools = slices.Clone(queues), slices.Clone(pools)
	r.mu.Unlock()
}

// SetPools replaces the pools (a configuration reload), keeping the queues.
func (r *Routing) SetPools(pools []string) {
	r.mu.Lock()
	r.pools = slices.Clone(pools)
	r.mu.Unlock()
}

// Queue returns the key of the configured queue that named (a job's
// queueUrl) names: the queue's key itself, its name, or, for a queue
// configured by name, a URL ending in /name. A URL configured as is must be
// given as is: the same name elsewhere (another account or region) is
// another queue.
func (r *Routing) Queue(named string) (string, bool) {
	if r == nil {
		return "", false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, q := range r.queues {
		if named == q.Key || named == q.Name {
			return q.Key, true
		}
		if q.ByName && strings.Contains(named, "://") && named[strings.LastIndex(named, "/")+1:] == q.Name {
			return q.Key, true
		}
	}
	return "", false
}

// QueueKeys lists the configured queues' keys, the default first.
func (r *Routing) QueueKeys() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, len(r.queues))
	for i, q := range r.queues {
		out[i] = q.Key
	}
	return out
}

// Pool reports whether code names a pool: a configured one, or
// DefaultPool, the name of whichever pool takes the jobs that name none.
func (r *Routing) Pool(code string) bool {
	if code == DefaultPool {
		return true
	}
	if r == nil {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Contains(r.pools, code)
}

// Pools lists the configured pools' codes.
func (r *Routing) Pools() []string {
	if r == nil {
		return []string{DefaultPool}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !slices.Contains(r.pools, DefaultPool) {
		return append([]string{DefaultPool}, r.pools...)
	}
	return slices.Clone(r.pools)
}

// CheckQueue returns the key of the configured queue a job or subscription
// names (queueUrl: see Routing.Queue), or notes a problem with queueUrl
// that lists the configured ones.
func (rules JobRules) CheckQueue(p *Problems, named string) (key string, ok bool) {
	key, ok = rules.Routing.Queue(named)
	switch {
	case ok:
	case len(rules.Routing.QueueKeys()) == 0:
		p.Add("queueUrl", "names no queue of this deployment (none is configured)")
	default:
		p.Add("queueUrl", "must be one of the configured queues: %s", strings.Join(rules.Routing.QueueKeys(), ", "))
	}
	return key, ok
}

// CheckPool reports whether code names a configured pool (poolCode), or
// notes a problem with poolCode that lists them.
func (rules JobRules) CheckPool(p *Problems, code string) bool {
	if rules.Routing.Pool(code) {
		return true
	}
	p.Add("poolCode", "must be one of the configured pools: %s", strings.Join(rules.Routing.Pools(), ", "))
	return false
}

// MaxPoolCodeLen bounds a pool code.
const MaxPoolCodeLen = 64
