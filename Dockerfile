# syntax=docker/dockerfile:1
# The toolgate gateway as a small image: built with the Rust toolchain,
# run on distroless (glibc and CA certificates, no shell, no package
# manager) as a non-root user.
#
#   docker build -t toolgate:0.1.0 .
#   docker run -p 8080:8080 -e TOOLGATE_API_KEY=... -e OPENAI_API_KEY=... toolgate:0.1.0
#
# The image serves deploy/container/ (builtin tools that need no files or
# subprocesses); mount a configuration folder of your own over
# /etc/toolgate to replace it. `execute_python` and `exec` need a Python
# and a shell the runtime image does not have.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p toolgate-server --bin toolgate \
    && cp target/release/toolgate /toolgate

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /toolgate /usr/local/bin/toolgate
COPY deploy/container/ /etc/toolgate/
# distroless nonroot
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/toolgate"]
CMD ["serve", "--config", "/etc/toolgate"]
