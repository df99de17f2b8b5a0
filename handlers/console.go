package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/web"
)

// keyCookie carries a signed-in console user's key: HttpOnly (no script
// reads it) and SameSite=Strict (no other site sends it).
const keyCookie = "bgjobs_key"

// pageCaller is the console's view of the caller.
func pageCaller(c echo.Context) (string, bool) {
	who, _ := c.Get(callerKey).(caller)
	return who.Agent, who.Admin
}

// securityHeaders sets the console's headers on every page and asset.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		web.SecurityHeaders(c.Response().Header())
		return next(c)
	}
}

// pageAuth admits a console request by its Authorization header or its
// sign-in cookie; anyone else is sent to the sign-in page.
func (a *authenticator) pageAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.Open(c.Request().Context()) {
			setCaller(c, caller{Agent: OpenAgent, Admin: true})
			return next(c)
		}
		who, ok, err := a.Lookup(c.Request().Context(), credential(c))
		if err != nil {
			return err
		}
		if !ok {
			if strings.HasPrefix(c.Request().URL.Path, "/monitoring") && c.Request().Header.Get("Authorization") != "" {
				return bgjobs.Errorf(bgjobs.EUnauthenticated, "the dashboard needs the admin key")
			}
			return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(c.Request().URL.Path))
		}
		if as := c.QueryParam("agent"); as != "" && who.Admin && bgjobs.ValidAgentName(as) {
			who.Agent = as
		}
		setCaller(c, who)
		return next(c)
	}
}

func handleLoginPage() echo.HandlerFunc {
	return func(c echo.Context) error {
		return console.Render(c, "login", console.Page{Title: "Sign in", Next: localPath(c.QueryParam("next"))})
	}
}

func handleLogin(a *authenticator) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := strings.TrimSpace(c.FormValue("key"))
		_, ok, err := a.Lookup(c.Request().Context(), key)
		if err != nil {
			return err
		}
		if !ok {
			c.Response().WriteHeader(http.StatusUnauthorized)
			return web.Render(c.Response(), "login", console.Page{Title: "Sign in", Error: "Unknown key.", Next: localPath(c.QueryParam("next"))})
		}
		c.SetCookie(&http.Cookie{Name: keyCookie, Value: key, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: c.Scheme() == "https", MaxAge: int((7 * 24 * time.Hour).Seconds())})
		return c.Redirect(http.StatusSeeOther, localPath(c.QueryParam("next")))
	}
}

func handleLogout() echo.HandlerFunc {
	return func(c echo.Context) error {
		c.SetCookie(&http.Cookie{Name: keyCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
		return c.Redirect(http.StatusSeeOther, "/login")
	}
}

// localPath returns next when it is a path on this server, else "/": where
// sign-in sends the browser must never be another site. Browsers read
// "/\evil.example" and "/<tab>/evil.example" as "//evil.example", another
// host, so a backslash or a control character anywhere refuses next, as
// does anything with a scheme or a host.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsRune(next, '\\') ||
		strings.ContainsFunc(next, unicode.IsControl) {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}
