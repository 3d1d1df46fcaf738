# hookledger's image: a static binary on distroless/static (no shell, no
# libc, no package manager), run as the image's non-root user. CA roots are
# compiled into the binary (golang.org/x/crypto/x509roots/fallback), so
# replay's HTTPS calls verify without a certificate store. The image ships
# hookledger alone: the development tools (dev, devdb, bench) are the
# separate binary hookledger-dev, which is not built here.
#
#   docker build -t hookledger .
#   docker run --rm -e DATABASE_URL=... hookledger migrate up
#   docker run --rm -p 8080:8080 -e DATABASE_URL=... -e STRIPE_WEBHOOK_SECRET=... hookledger serve
#
# What was verified without a Docker daemon: docs/DEPLOYING.md, "Container image".

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The revision comes from .git when the build context has it (-buildvcs=auto).
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags="-s -w" -o /out/hookledger ./app/cmd/hookledger

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hookledger /hookledger
USER 65532:65532
EXPOSE 8080
ENV HTTP_ADDR=:8080
# No shell in the image: the binary checks itself (GET /readyz on HTTP_ADDR).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["/hookledger", "healthcheck"]
ENTRYPOINT ["/hookledger"]
CMD ["serve"]
