package model_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/model"
)

func TestValidateNeverShowsBaseURLCredentials(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-in-the-url"
	for _, u := range []string{"ftp://user:" + pw + "@models.example/v1", "https//user:" + pw + "@models.example"} {
		err := model.Config{Provider: "openai", Model: "m", BaseURL: u}.Validate()
		if err == nil || strings.Contains(err.Error(), pw) {
			t.Errorf("Validate(base_url %q) = %v, want an error without the password", u, err)
		}
	}
}
