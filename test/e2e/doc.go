// Package e2e runs the shipped lattice image in real containers: control
// with embedded NATS, an LRP relay and pod-mode sandboxes, each with every
// capability dropped, a read-only root filesystem, user nobody and no
// devices. The tests build the image from the repository's Dockerfile,
// start the containers with testcontainers-go and check that sandboxes
// register, reach each other directly on a shared Docker network and through
// the relay across two networks, and keep their identity when restarted on
// their state volume.
//
// The suite needs a Docker engine and skips, saying so, without one. Nothing
// is pulled: the image is FROM scratch around a binary the test compiles.
package e2e
