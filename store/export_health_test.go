package store

// HealthQuery is the subscriptions' health statement, for EXPLAIN.
const HealthQuery = healthQuery

// FailedJobsQuery counts the jobs that ended undelivered in a window, for EXPLAIN.
const FailedJobsQuery = failedJobsQuery
