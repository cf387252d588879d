package server

// bulkRequest serves POST /{table}?comp=bulk.
func (s *Server) bulkRequest(rq *request, method string) error {
	return s.aclRequest(rq, method) // TODO(i11): bulk endpoint
}
