package router

import (
	"errors"
	"fmt"
	"strings"
)

// MaxConcurrency bounds a pool's concurrency.
const MaxConcurrency = 1000

// checkPool reports what is wrong with one pool's configuration.
func checkPool(pc PoolConfig) error {
	switch {
	case strings.TrimSpace(pc.Code) == "":
		return errors.New("a pool needs a code")
	case pc.Concurrency < 1 || pc.Concurrency > MaxConcurrency:
		return fmt.Errorf("pool %s: concurrency must be 1 to %d (got %d)", pc.Code, MaxConcurrency, pc.Concurrency)
	case pc.RatePerMinute < 0:
		return fmt.Errorf("pool %s: rateLimitPerMinute must be 0 (unlimited) or more (got %d)", pc.Code, pc.RatePerMinute)
	}
	return nil
}

// checkPools reports what is wrong with a whole set of pools.
func checkPools(pcs []PoolConfig) error {
	if len(pcs) == 0 {
		return errors.New("router: no pools configured")
	}
	seen := map[string]bool{}
	var errs []error
	for _, pc := range pcs {
		if err := checkPool(pc); err != nil {
			errs = append(errs, err)
		}
		if seen[pc.Code] {
			errs = append(errs, fmt.Errorf("pool %s appears twice", pc.Code))
		}
		seen[pc.Code] = true
	}
	return errors.Join(errs...)
}

// sizeRoom sets how many groups the router may hold (the pools'
// concurrency plus the buffer) and which pool takes pointers of unknown
// codes, after the pools changed (lock held, or before Run).
func (r *Router) sizeRoom() {
	r.maxHeld = r.cfg.Buffer
	for _, p := range r.pools {
		r.maxHeld += p.concurrency
	}
	r.def = r.pools[r.cfg.DefaultPool]
	for _, p := range r.order {
		if r.def == nil && !p.draining {
			r.def = p
		}
	}
	r.wakeReceivers()
}

// retire drops a removed pool that has finished everything it held (lock
// held).
func (r *Router) retire(p *Pool) {
	for i, x := range r.order {
		if x == p {
			r.order = append(r.order[:i:i], r.order[i+1:]...)
			break
		}
	}
	r.log.Info("removed pool drained; it is gone", "pool", p.code)
}

// apply changes one pool in place, or adds it (lock held). A pool being
// drained that comes back is taken back as it is, with its workers started
// again: its idle ones left when it was removed.
func (r *Router) apply(pc PoolConfig) {
	p := r.pools[pc.Code]
	takenBack := false
	if p == nil {
		for _, x := range r.order {
			if x.code == pc.Code && x.draining {
				p, takenBack = x, true
				p.draining = false
				r.pools[pc.Code] = p
				r.log.Info("pool taken back while it drained", "pool", pc.Code)
			}
		}
	}
	if p == nil {
		p = newPool(pc, &r.mu)
		r.pools[pc.Code] = p
		r.order = append(r.order, p)
		r.startWorkers(p)
		r.wakeReceivers()
		r.log.Info("pool added", "pool", pc.Code, "concurrency", pc.Concurrency, "rate_limit_per_minute", pc.RatePerMinute)
		return
	}
	if p.concurrency != pc.Concurrency {
		r.log.Info("pool concurrency changed", "pool", pc.Code, "from", p.concurrency, "to", pc.Concurrency)
		p.concurrency = pc.Concurrency
		r.startWorkers(p)  // more: started now
		p.cond.Broadcast() // fewer: idle workers leave now, busy ones after their mediation
		r.wakeReceivers()  // more room: receives and the API's offers may fill it
	}
	if old := p.rate(); old != pc.RatePerMinute {
		r.log.Info("pool rate limit changed", "pool", pc.Code, "from_per_minute", old, "to_per_minute", pc.RatePerMinute)
		p.setRate(pc.RatePerMinute)
	}
	if takenBack {
		r.startWorkers(p) // up to its concurrency
		r.wakeReceivers()
	}
}

// SetPool changes one pool's concurrency and rate limit in place, or adds
// the pool. Nothing it holds is dropped or reordered: fewer workers means
// its busy ones leave after their mediation.
func (r *Router) SetPool(pc PoolConfig) (PoolStats, error) {
	if err := checkPool(pc); err != nil {
		return PoolStats{}, err
	}
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return PoolStats{}, errors.New("the router is stopping")
	}
	r.apply(pc)
	r.sizeRoom()
	r.mu.Unlock()
	r.poolsChanged()
	for _, s := range r.Stats() {
		if s.Code == pc.Code {
			return s, nil
		}
	}
	return PoolStats{}, fmt.Errorf("pool %s vanished", pc.Code)
}

// SetPools makes the pools pcs: those that stay are changed in place,
// new ones added, and those not in pcs drain (they finish what they hold,
// messages of their groups still join them meanwhile, then they go; other
// messages naming them go to the default pool).
func (r *Router) SetPools(pcs []PoolConfig) error {
	if err := checkPools(pcs); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, pc := range pcs {
		keep[pc.Code] = true
	}
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return errors.New("the router is stopping")
	}
	for _, pc := range pcs {
		r.apply(pc)
	}
	for code, p := range r.pools {
		if keep[code] {
			continue
		}
		delete(r.pools, code)
		p.draining = true
		p.cond.Broadcast()
		r.log.Info("pool removed; it drains", "pool", code, "in_flight", p.inFlight, "buffered", p.buffered)
		if p.workers == 0 && p.inFlight == 0 && p.buffered == 0 {
			r.retire(p)
		}
	}
	r.sizeRoom()
	r.mu.Unlock()
	r.poolsChanged()
	return nil
}

// Reload reads the pools from the configuration again (Config.Reload) and
// applies them (SetPools).
func (r *Router) Reload() error {
	if r.cfg.Reload == nil {
		return errors.New("nothing to reload from: the pools do not come from a file (DISPATCH_ROUTER_CONFIG)")
	}
	pcs, err := r.cfg.Reload()
	if err == nil {
		err = r.SetPools(pcs)
	}
	if err != nil {
		r.warnings.add(Warning{Type: WarnReloadFailed, Message: "the pools were not changed: " + err.Error()})
	}
	return err
}

// PoolConfigs returns the pools as they are configured now (draining ones
// left out).
func (r *Router) PoolConfigs() []PoolConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []PoolConfig
	for _, p := range r.order {
		if !p.draining {
			out = append(out, PoolConfig{Code: p.code, Concurrency: p.concurrency, RatePerMinute: p.rate()})
		}
	}
	return out
}

func (r *Router) poolsChanged() {
	if r.cfg.PoolsChanged != nil {
		r.cfg.PoolsChanged(r.PoolConfigs())
	}
}
