package builtin

import (
	"net"

	"github.com/agentwork/agentwork/tools"
)

// FetchWithResolver is Fetch with the names resolved by res, so that a
// test can aim a name at any address.
func FetchWithResolver(c FetchConfig, res *net.Resolver) (tools.Spec, error) {
	f, err := newFetcher(c)
	if err != nil {
		return tools.Spec{}, err
	}
	f.resolver = res
	return f.spec(), nil
}
