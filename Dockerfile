# One image holds both binaries, kerf-agent and kerf-leader (docs/image.md
# says why). The build stage runs hack/build.sh, the script `make build`
# runs, so the image holds exactly what a local build makes.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN hack/build.sh /out kerf-agent kerf-leader

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kerf-agent /out/kerf-leader /usr/local/bin/
# distroless's nonroot user. The agent's DaemonSet runs it with the
# capabilities BPF needs (manifests/); the leader runs as this user.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kerf-leader"]
