package node

import (
	"strings"

	"github.com/latticelab/lattice/control/controlapi"
)

// TagPrefix marks an ICEConfig.AlwaysDirect entry that names a tag, not a
// node: "tag:router" matches every peer whose join token gave it the tag
// router (control.Peer.Tags).
const TagPrefix = "tag:"

// alwaysDirect reports whether c names info, by name or by one of its
// tags, as a peer that is never lazy.
func (c *ICEConfig) alwaysDirect(info controlapi.Peer) bool {
	for _, e := range c.AlwaysDirect {
		if tag, ok := strings.CutPrefix(e, TagPrefix); ok {
			if info.HasTag(tag) {
				return true
			}
		} else if e == info.Name {
			return true
		}
	}
	return false
}
