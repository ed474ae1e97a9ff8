package control

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// serveHTTP starts POST /v1/register, POST /v1/servers and GET /healthz
// on HTTPListen,
// over TLS when Config.TLS is set (the handshake is bounded by the
// server's timeouts, as net/http does it).
func (s *Server) serveHTTP(ctx context.Context) error {
	var tc *tls.Config
	if s.cfg.TLS != nil {
		var err error
		if tc, err = serverTLS(s.cfg.TLS); err != nil {
			return fmt.Errorf("control: HTTP: %w", err)
		}
	}
	ln, err := s.cfg.Network.Listen(ctx, "tcp", s.cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("control: listen HTTP on %s: %w", s.cfg.HTTPListen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/register", s.httpRegister)
	mux.HandleFunc("POST /v1/servers", s.httpServers)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.httpLn = ln
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	serveLn := ln
	if tc != nil {
		serveLn = tls.NewListener(ln, tc)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(serveLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server stopped", "err", err)
		}
	}()
	s.log.Info("HTTP registration listening", "addr", ln.Addr().String(), "tls", tc != nil)
	return nil
}

// HTTPURL is the base URL of HTTP registration (https:// with TLS), ""
// without HTTP.
func (s *Server) HTTPURL() string {
	if s.httpLn == nil {
		return ""
	}
	if s.cfg.TLS != nil {
		return "https://" + s.httpLn.Addr().String()
	}
	return "http://" + s.httpLn.Addr().String()
}

func (s *Server) httpRegister(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, controlapi.MaxRequestBytes))
	if err != nil {
		s.refused.Add(1)
		writeJSON(w, http.StatusRequestEntityTooLarge, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeBadRequest, Message: fmt.Sprintf("request over %d bytes", controlapi.MaxRequestBytes)}})
		return
	}
	resp, err := s.handleRegister(r.Context(), body)
	if err != nil {
		e := asError(err)
		writeJSON(w, httpStatus(e.Code), controlapi.ErrorReply{Error: e})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) httpServers(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxServersRequestBytes))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeBadRequest, Message: fmt.Sprintf("servers request over %d bytes", maxServersRequestBytes)}})
		return
	}
	resp, err := s.handleServers(body)
	if err != nil {
		e := asError(err)
		writeJSON(w, httpStatus(e.Code), controlapi.ErrorReply{Error: e})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func httpStatus(code string) int {
	switch code {
	case controlapi.CodeBadRequest:
		return http.StatusBadRequest
	case controlapi.CodeBadToken, controlapi.CodeBadProof:
		return http.StatusUnauthorized
	case controlapi.CodeNameTaken:
		return http.StatusConflict
	case controlapi.CodeFull:
		return http.StatusServiceUnavailable
	case controlapi.CodeNotFound:
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
