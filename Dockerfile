# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /dispatch ./cmd/dispatch

FROM gcr.io/distroless/static:nonroot
COPY --from=build /dispatch /dispatch
EXPOSE 8080 8081
ENTRYPOINT ["/dispatch"]
