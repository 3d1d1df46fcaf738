package failure

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/web"
)

// maxReasonBody bounds a discard's request body.
const maxReasonBody = 16 << 10

// Routes lists the failure groups' admin API, behind auth (the admin
// surfaces' middleware: the token, and the CSRF proof of a browser's
// POST) and never framed by another site:
//
//	GET  /admin/failures                {"groups":[...],"failed":N,"truncated":false}
//	POST /admin/failures/:id/requeue    {"group","counts","events":[{"namespace","event_id","result","reason"}]}
//	POST /admin/failures/:id/discard    the same, with {"reason":"..."}
func Routes(r gin.IRouter, auth gin.HandlerFunc, g *Groups) {
	a := r.Group("/admin/failures", web.NoFraming, auth)
	a.GET("", g.list)
	a.POST("/:id/requeue", g.requeue)
	a.POST("/:id/discard", g.discard)
}

func (g *Groups) list(c *gin.Context) {
	r, err := g.List(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, r)
}

func (g *Groups) requeue(c *gin.Context) {
	g.act(c, func(keys []ledger.EventKey) (Result, error) {
		return g.Requeue(c.Request.Context(), c.Param("id"), keys)
	})
}

func (g *Groups) discard(c *gin.Context) {
	var body struct {
		Reason string `json:"reason"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxReasonBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		c.JSON(http.StatusRequestEntityTooLarge, gin.H{"error": fmt.Sprintf("body over %d bytes", maxReasonBody)})
		return
	case err != nil || json.Unmarshal(raw, &body) != nil:
		c.JSON(http.StatusBadRequest, gin.H{"error": `body: want {"reason":"..."}`})
		return
	case strings.TrimSpace(body.Reason) == "":
		c.JSON(http.StatusBadRequest, gin.H{"error": `reason: ` + ledger.ErrNoReason.Error() + `, as {"reason":"..."}`})
		return
	}
	g.act(c, func(keys []ledger.EventKey) (Result, error) {
		return g.Discard(c.Request.Context(), c.Param("id"), keys, body.Reason)
	})
}

// act runs fn on the events of the group in the path: 404 when it has
// none, else what fn did to each.
func (g *Groups) act(c *gin.Context, fn func([]ledger.EventKey) (Result, error)) {
	_, keys, err := g.Find(c.Request.Context(), c.Param("id"))
	if err == nil {
		var r Result
		if r, err = fn(keys); err == nil {
			c.JSON(http.StatusOK, r)
			return
		}
	}
	if errors.Is(err, ErrUnknownGroup) {
		c.JSON(http.StatusNotFound, gin.H{"error": err.Error()})
		return
	}
	fail(c, err)
}

// fail logs an internal error once, here at the edge, and answers 500.
func fail(c *gin.Context, err error) {
	web.Logger(c).Error("admin request failed", zap.Error(err))
	c.JSON(http.StatusInternalServerError, gin.H{"error": "internal error"})
}
