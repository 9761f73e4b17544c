# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Stamped into `dispatch version`; `make image` passes them from Git:
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) --build-arg BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
# The variables live in the program's package, cmd/dispatch/internal/app.
RUN CGO_ENABLED=0 go build -trimpath -tags nomsgpack,grpcnotrace -ldflags="-s -w -X github.com/dispatchhq/dispatch/cmd/dispatch/internal/app.version=${VERSION} -X github.com/dispatchhq/dispatch/cmd/dispatch/internal/app.commit=${COMMIT} -X github.com/dispatchhq/dispatch/cmd/dispatch/internal/app.date=${BUILD_DATE}" -o /dispatch ./cmd/dispatch

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}"
COPY --from=build /dispatch /dispatch
EXPOSE 8080 8081
ENTRYPOINT ["/dispatch"]
