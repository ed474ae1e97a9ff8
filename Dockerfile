# The lattice image: two static binaries, nothing else (no shell, no libc,
# no package manager), run as nobody: lattice, and lattice-sandbox, the
# sandbox command alone, which `lattice sandbox` runs when it lies beside
# it (an idle sandbox then maps a third less). They are built on the host,
# because no registry is reachable to pull a Go toolchain image:
#
#   make image                  # lattice:dev      (community edition)
#   make EDITION=pro image      # lattice:dev-pro  (Pro edition)
#
# which runs, in effect:
#
#   CGO_ENABLED=0 go build [-tags pro] -trimpath -o bin/image/ ./cmd/lattice ./cmd/lattice-sandbox
#   docker build --build-arg EDITION=... -t lattice:dev .
#
# The root filesystem can be mounted read-only: everything that writes takes
# a directory (sandbox --state-dir, control --state-dir). /var/lib/lattice is
# owned by nobody, so a named volume mounted there starts out writable, e.g.
#
#   docker run --read-only --cap-drop ALL --security-opt no-new-privileges \
#     -v agent-1:/var/lib/lattice lattice:dev sandbox start --name agent-1 \
#     --control tls://control:4222 --token-file /var/lib/lattice/token \
#     --state-dir /var/lib/lattice/state --socks5 0.0.0.0:1080
FROM scratch
ARG EDITION=community
LABEL org.opencontainers.image.title="lattice" \
      org.opencontainers.image.source="https://github.com/latticelab/lattice" \
      io.lattice.edition="${EDITION}"
COPY bin/image/lattice /lattice
COPY bin/image/lattice-sandbox /lattice-sandbox
# An empty directory from the context; --chown applies to it, not to its parents.
COPY --chown=65534:65534 bin/image/var/ /var/lib/lattice/
USER 65534:65534
# The default state directories (sandbox, up) live under the user's config
# directory, $HOME/.config: keep them on the volume, not the read-only root.
ENV HOME=/var/lib/lattice
ENTRYPOINT ["/lattice"]
