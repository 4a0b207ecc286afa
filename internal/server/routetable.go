package server

// RouteInfo is what the route table declares about one route's access,
// for tools and tests that check every route (the authorization matrix):
// a route added to the table is in the list without anyone adding it.
type RouteInfo struct {
	Method, Path string
	// Access is "public", "key", "console", "worker" or "peer".
	Access string
	// Permission is the key permission a "key" route needs.
	Permission string
	// Operator is set on routes that also need the owner or operator role.
	Operator bool
}

// RouteTable lists every route of the public listener and the console.
func RouteTable() []RouteInfo {
	var s Server
	var out []RouteInfo
	for _, r := range s.routes() {
		info := RouteInfo{Method: r.method, Path: r.path, Permission: string(r.perm), Operator: r.operator != ""}
		switch r.access {
		case accessPublic:
			info.Access = "public"
		case accessKey:
			info.Access = "key"
		case accessConsole:
			info.Access = "console"
		case accessWorker:
			info.Access = "worker"
		case accessPeer:
			info.Access = "peer"
		}
		out = append(out, info)
	}
	return out
}
