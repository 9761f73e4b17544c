#!/bin/bash
# LocalStack init hook (docker compose --profile localstack): creates the
# dispatch FIFO queue once LocalStack is ready.
set -euo pipefail
awslocal sqs create-queue --queue-name dispatch.fifo \
  --attributes FifoQueue=true,ContentBasedDeduplication=false,VisibilityTimeout=60
