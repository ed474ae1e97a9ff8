package runner

import "syscall"

// peerUID is the uid of the process at the other end of unix socket fd
// (SO_PEERCRED).
func peerUID(fd int) (uint32, error) {
	cred, err := syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}
