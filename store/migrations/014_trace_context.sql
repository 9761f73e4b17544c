-- The W3C trace context of the span that created each job ("traceparent",
-- or "traceparent\ntracestate"; NULL with tracing off): the outbox sends it
-- with the job's pointer as SQS message attributes, and every delivery
-- attempt joins that trace. A column without a default: adding it to the
-- partitioned parent changes only the catalog, and every partition has it.
ALTER TABLE dispatch_job ADD COLUMN trace_context text;
