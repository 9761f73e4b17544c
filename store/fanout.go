package store

import "github.com/dispatchhq/dispatch"

// fanoutLimit is how many subscriptions an event whose data is dataLen
// bytes may match: at most maxFanout, and no more than keep the copies of
// its data (one per job) within maxFanoutBytes.
func (s *Store) fanoutLimit(dataLen int) int {
	limit := s.maxFanout
	if dataLen > 0 {
		limit = int(min(int64(limit), s.maxFanoutBytes/int64(dataLen)))
	}
	return limit
}

// fanoutRefused is the error of an event that matched more subscriptions
// than fanoutLimit allows, naming the bound it broke and by how much.
func (s *Store) fanoutRefused(matched, dataLen int) error {
	if matched > s.maxFanout {
		return dispatch.Errorf(dispatch.EUnprocessable,
			"the event matches %d ACTIVE subscriptions; at most %d may match one event (DISPATCH_MAX_FANOUT); nothing was stored",
			matched, s.maxFanout)
	}
	return dispatch.Errorf(dispatch.EUnprocessable,
		"the event's data (%d bytes) would be copied into %d jobs, %d bytes in all; at most %d bytes (DISPATCH_MAX_FANOUT_BYTES); nothing was stored",
		dataLen, matched, int64(dataLen)*int64(matched), s.maxFanoutBytes)
}
