// Starts the bundled SQS emulator (local-aws-sqs) for make run and make test.
// Usage: node server.js [port]   (default 9324, or $SQS_PORT)
"use strict";
const { createSqsServer } = require("local-aws-sqs");

const port = Number(process.argv[2] || process.env.SQS_PORT || 9324);

createSqsServer({ port, hostname: "127.0.0.1", emulateQueueCreationLifecycle: false })
  .then(() => console.log(`sqs emulator listening on http://127.0.0.1:${port}`))
  .catch((err) => {
    console.error("sqs emulator failed to start:", err);
    process.exit(1);
  });

// local-aws-sqs throws on some malformed requests (e.g. a JSON request
// without X-Amz-Target) from an async handler; one bad request must not
// take the emulator, and every queue in it, down.
process.on("uncaughtException", (err) => console.error("sqs emulator: request failed:", err.message));
process.on("unhandledRejection", (err) => console.error("sqs emulator: request failed:", err && err.message));

for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(0));
