# lattice:dev-gvisor, the image of deploy/sandbox/gvisor: the Pro binary
# plus what gvisor mode runs (a static runsc; ip and iptables for phase 1).
# Built from the repository root after `make EDITION=pro image` and
# `make runsc` (a static runsc in $PATH or GOPATH/bin):
#
#   cp "$(command -v runsc || echo "$(go env GOPATH)/bin/runsc")" bin/image/runsc
#   docker build -f deploy/gvisor.Dockerfile -t lattice:dev-gvisor .
#
# It needs a registry for its base. test/e2e/gvisor_image_test.go builds
# the equivalent from this host's binaries when none is reachable.
FROM debian:trixie-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 iptables \
 && rm -rf /var/lib/apt/lists/*
COPY bin/image/runsc /usr/local/bin/runsc
COPY bin/image/lattice /lattice
COPY bin/image/lattice-sandbox /lattice-sandbox
USER 0:0
ENTRYPOINT ["/lattice"]
