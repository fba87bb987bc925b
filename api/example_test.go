package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
)

// greeter is a Router, as cron and heartbeat provide one.
type greeter struct{}

func (greeter) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/hello/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") == "nobody" {
			problem.Error(w, http.StatusNotFound, "nobody to greet")
			return
		}
		fmt.Fprintf(w, "hello %s", r.PathValue("name"))
	})
}

// Routes mounted through Deps.Routes sit behind the admin token.
func ExampleRouter() {
	s := api.New(api.Config{AdminToken: "example-admin-token"}, api.Deps{Routes: []api.Router{greeter{}}})
	for _, token := range []string{"example-admin-token", ""} {
		req := httptest.NewRequest(http.MethodGet, "/v1/hello/ada", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len() > 0)
	}
	// Output:
	// 200 text/plain; charset=utf-8 true
	// 401 application/problem+json true
}
