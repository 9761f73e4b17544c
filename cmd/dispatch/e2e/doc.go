// Package e2e holds dispatch's end-to-end suites; it has no code of its own
// beyond this comment. They run the whole program, app.Run in process on
// :0 ports or the built binary as subprocesses, against a real PostgreSQL
// (a database per test) and the SQS stand-in (a queue per test), with
// receivers on loopback, and prove what a user of the service would notice:
//
//   - delivery: signed, verified independently, retried with backoff to
//     COMPLETED or ERROR, per-group order, pool limits, events fanned out to
//     matching subscriptions, rate limits, the handshake (e2e, events);
//   - security: credentials reach only allowed targets, secrets sealed at
//     rest, rotation and rekey, the SSRF guard, hostile requests, tokens
//     (targets, security, ssrf, hostile);
//   - failure: routers, APIs, the queue and PostgreSQL killed or restarted
//     mid-delivery, SIGTERM during load, a hung SQS, a process started
//     before its database, with every job delivered and nothing lost (chaos,
//     scale, replicas, hung_sqs, startup, queue_cut);
//   - the operator console driven in headless Chromium against real
//     deliveries (console*);
//   - the command line, the version stamp of `make build` and the
//     Dockerfile, metrics, tracing, and the README's walk-throughs,
//     docker-compose.yml and the deployment and alerting documents kept true
//     to the code (cli, metrics, trace, readme, compose, deployment_*,
//     alerts*).
//
// docs/testing.md says what each suite proves in more detail.
package e2e
