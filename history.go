package dispatch

import "time"

// Storage is what the delivery history takes in the database, for
// operators: the database's size, each table's rows and bytes, the oldest
// job kept, and the partition upkeep's last and next run.
type Storage struct {
	DatabaseBytes  int64
	Tables         []TableStorage
	OldestJobAt    *time.Time // the oldest job kept (nil: none)
	Partitions     int        // job partitions kept
	LastUpkeep     *time.Time // when partition upkeep last ran (any replica)
	NextUpkeep     *time.Time
	LastDropped    int    // partitions the last upkeep dropped
	HeldPartitions int    // partitions past retention kept for their live jobs
	LastError      string // the last upkeep's error, if it failed
}

// TableStorage is one table's rows (PostgreSQL's estimate, summed over its
// partitions) and bytes (heap, indexes and TOAST).
type TableStorage struct {
	Name  string
	Rows  int64
	Bytes int64
}
