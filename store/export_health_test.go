package store

// HealthQuery is the subscriptions' health statement, for EXPLAIN.
const HealthQuery = healthQuery
