// Validates an OpenAPI document with swagger-parser (structure, schema,
// $refs), independently of Redocly's linter.
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2];
try {
  const api = await SwaggerParser.validate(file);
  console.log(`${file}: valid OpenAPI ${api.openapi} (swagger-parser)`);
} catch (err) {
  console.error(`${file}: ${err.message}`);
  process.exit(1);
}
