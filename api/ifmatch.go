package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/agentwork/agentwork/api/problem"
)

// IfMatch reads the revision a request's If-Match header names: the ETag
// of a GET (`"7"`), weak (`W/"7"`) or bare (`7`). It is nil without the
// header or with If-Match: * (any revision). A header that names no
// revision is answered with 400 problem details saying what to send, and
// ok is false: the caller answers nothing more.
//
// Memory documents (PUT /v1/memory/{doc}) and cron jobs (PATCH and DELETE
// /v1/jobs/{id}) read it the same way; their 412 names the revision the
// record is at now.
func IfMatch(w http.ResponseWriter, r *http.Request) (rev *uint64, ok bool) {
	m := strings.TrimSpace(r.Header.Get("If-Match"))
	if m == "" || m == "*" {
		return nil, true
	}
	n, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(m, "W/"), `"`), 10, 64)
	if err != nil {
		problem.Invalid(w, "If-Match: "+strconv.Quote(m)+" is not a revision: send the ETag (or revision) of the GET you edited", problem.FieldError{Field: "If-Match", Detail: "want a revision such as \"7\""})
		return nil, false
	}
	return &n, true
}

// ETag is the ETag of revision rev, as IfMatch reads it back: `"7"`.
func ETag(rev uint64) string { return strconv.Quote(strconv.FormatUint(rev, 10)) }
