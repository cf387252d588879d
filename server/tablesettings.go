package server

// tableSettingsRequest serves GET and PUT /{table}?comp=properties.
func (s *Server) tableSettingsRequest(rq *request, method string) error {
	return s.aclRequest(rq, method) // TODO(i11): settings endpoint
}
