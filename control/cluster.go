package control

import (
	"github.com/latticelab/lattice/control/controlapi"
)

// natsURLs are the NATS URLs given to nodes: AdvertiseNATS's list, else
// the embedded server's URL, else NATSURL's list.
func (s *Server) natsURLs() []string {
	switch {
	case s.cfg.AdvertiseNATS != "":
		return controlapi.SplitURLs(s.cfg.AdvertiseNATS)
	case s.nats != nil:
		return []string{s.nats.URL()}
	}
	return controlapi.SplitURLs(s.cfg.NATSURL)
}
