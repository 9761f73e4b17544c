// A client generated from api/openapi.json (openapi-typescript types,
// openapi-fetch calls) type-checks the calls a service makes, with every
// defaulted field left out. `make openapi/check` runs tsc on it; it is not
// run against a server.
import createClient from "openapi-fetch";
import type { components, paths } from "./generated/dispatch";

const client = createClient<paths>({
  baseUrl: "https://dispatch.example.com",
  headers: { Authorization: "Bearer <api token>" },
});

// Create a job with only the required fields: payloadContentType,
// maxRetries and retryStrategy have defaults on the server.
export async function createJob(): Promise<components["schemas"]["Job"] | undefined> {
  const { data, error } = await client.POST("/api/dispatch/jobs", {
    body: {
      source: "billing",
      type: "invoice.paid",
      targetUrl: "https://partner.example/hooks/dispatch",
      payload: JSON.stringify({ invoiceId: "inv_123" }),
    },
  });
  if (error) {
    console.error(error.error.code, error.error.message);
    return undefined;
  }
  // The job that comes back has every default filled in.
  const attempts: number = data.maxRetries;
  const strategy: "exponential" | "linear" | "fixed" = data.retryStrategy;
  console.log(data.id, data.status, attempts, strategy, data.payloadContentType);
  return data;
}

// A batch, and a subscription, each without their defaulted fields.
export async function more(): Promise<void> {
  await client.POST("/api/dispatch/jobs/batch", {
    body: { jobs: [{ source: "billing", type: "invoice.paid", targetUrl: "https://partner.example/hooks", payload: "{}" }] },
  });
  await client.POST("/api/dispatch/subscriptions", {
    body: { name: "billing", url: "https://partner.example/hooks", eventTypes: ["invoice.*"] },
  });
  await client.GET("/api/dispatch/jobs/{id}", { params: { path: { id: "7216541328467054592" } } });
}
