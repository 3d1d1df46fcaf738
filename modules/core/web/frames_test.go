package web_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/web"
)

// TestNoFramingOnRefusals: the headers are set before the chain runs, so
// a middleware that refuses the request (a 401) still sends them.
func TestNoFramingOnRefusals(t *testing.T) {
	t.Parallel()
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	refuse := func(c *gin.Context) { c.AbortWithStatus(http.StatusUnauthorized) }
	e.GET("/refused", web.NoFraming, refuse, func(c *gin.Context) { c.Status(http.StatusOK) })
	e.GET("/served", web.NoFraming, func(c *gin.Context) { c.String(http.StatusOK, "<html>") })
	for path, code := range map[string]int{"/refused": http.StatusUnauthorized, "/served": http.StatusOK} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, code, w.Code)
		require.Equal(t, "DENY", w.Header().Get("X-Frame-Options"), path)
		require.Equal(t, "frame-ancestors 'none'", w.Header().Get("Content-Security-Policy"), path)
	}
}
