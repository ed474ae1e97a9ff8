//go:build !linux

package iptables

import "errors"

type nflogSocket struct{}

func openNFLOG(string, uint16) (*nflogSocket, error) {
	return nil, errors.New("iptables: NFLOG is Linux's")
}

func (s *nflogSocket) read([]byte) (int, error) { return 0, errors.New("iptables: closed") }

func (s *nflogSocket) close() error { return nil }
