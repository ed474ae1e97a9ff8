package stun

import "sync/atomic"

// Stats counts what a Server did with the datagrams it read. Every datagram
// is accounted for exactly once:
//
//	Datagrams = Requests + Dropped.Total()
//	Requests  = Responses + UnknownAttribute + BadRequest
type Stats struct {
	// Datagrams is every datagram read, on any of the server's sockets.
	Datagrams uint64
	// Requests counts well-formed Binding requests. Each gets exactly one
	// response, counted below.
	Requests uint64
	// Responses counts success responses.
	Responses uint64
	// Changed counts the success responses sent from another socket than
	// the request arrived on, because of CHANGE-REQUEST.
	Changed uint64
	// Trimmed counts the success responses that left out optional
	// attributes so as not to be larger than their request (see the
	// package documentation); such clients should pad their requests.
	Trimmed uint64
	// UnknownAttribute counts 420 error responses: comprehension-required
	// attributes the server does not understand, CHANGE-REQUEST without an
	// alternate address among them.
	UnknownAttribute uint64
	// BadRequest counts 400 error responses (a malformed CHANGE-REQUEST).
	BadRequest uint64
	// Unanswered counts the error responses not sent because even their
	// shortest form would be larger than the request. They are included
	// in UnknownAttribute or BadRequest.
	Unanswered uint64
	// Dropped counts datagrams answered with nothing, by reason.
	Dropped Drops
	// SendErrors counts responses that could not be encoded or written.
	// They are included in Responses, UnknownAttribute or BadRequest.
	SendErrors uint64
	// ReadErrors counts failed reads other than the ones Close causes.
	ReadErrors uint64
}

// Drops counts the datagrams a Server dropped, by reason.
type Drops struct {
	// NotSTUN: shorter than a STUN header, first two bits set, or no magic
	// cookie (this includes RFC 3489 requests).
	NotSTUN uint64
	// Malformed: the length field disagrees with the datagram or is not a
	// multiple of 4, or the attributes do not decode.
	Malformed uint64
	// BadFingerprint: FINGERPRINT is wrong, repeated or not last.
	BadFingerprint uint64
	// NotRequest: indications, success and error responses.
	NotRequest uint64
	// UnsupportedMethod: requests for methods other than Binding.
	UnsupportedMethod uint64
	// Oversize: datagrams larger than 1500 bytes.
	Oversize uint64
}

// Total is the number of dropped datagrams.
func (d Drops) Total() uint64 {
	return d.NotSTUN + d.Malformed + d.BadFingerprint + d.NotRequest + d.UnsupportedMethod + d.Oversize
}

// counters is the live, concurrently updated form of Stats.
type counters struct {
	datagrams, requests, responses, changed atomic.Uint64
	trimmed, unanswered                     atomic.Uint64
	unknownAttribute, badRequest            atomic.Uint64
	sendErrors, readErrors                  atomic.Uint64

	notSTUN, malformed, badFingerprint, notRequest, unsupportedMethod, oversize atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Datagrams:        c.datagrams.Load(),
		Requests:         c.requests.Load(),
		Responses:        c.responses.Load(),
		Changed:          c.changed.Load(),
		Trimmed:          c.trimmed.Load(),
		Unanswered:       c.unanswered.Load(),
		UnknownAttribute: c.unknownAttribute.Load(),
		BadRequest:       c.badRequest.Load(),
		SendErrors:       c.sendErrors.Load(),
		ReadErrors:       c.readErrors.Load(),
		Dropped: Drops{
			NotSTUN:           c.notSTUN.Load(),
			Malformed:         c.malformed.Load(),
			BadFingerprint:    c.badFingerprint.Load(),
			NotRequest:        c.notRequest.Load(),
			UnsupportedMethod: c.unsupportedMethod.Load(),
			Oversize:          c.oversize.Load(),
		},
	}
}
