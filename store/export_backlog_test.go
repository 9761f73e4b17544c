package store

// BacklogQuery is the metrics' backlog statement, for EXPLAIN.
const BacklogQuery = backlogQuery
