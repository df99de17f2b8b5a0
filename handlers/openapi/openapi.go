// Package openapi is the OpenAPI 3 document of bgjobs' HTTP API, served
// at /openapi.json. handlers/routes_test.go checks that every route is
// documented and every documented path is routed.
package openapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// The document is built from small helpers so each operation reads as one
// line.

type obj = map[string]any

func ref(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }

func resp(desc string, schema obj) obj {
	r := obj{"description": desc}
	if schema != nil {
		r["content"] = obj{"application/json": obj{"schema": schema}}
	}
	return r
}

func errs(codes ...string) obj {
	out := obj{}
	for _, c := range codes {
		out[c] = obj{"$ref": "#/components/responses/Error"}
	}
	return out
}

func op(summary string, body obj, ok string, okSchema obj, params []obj, errCodes ...string) obj {
	responses := errs(append([]string{"401"}, errCodes...)...)
	responses[ok] = resp(summary, okSchema)
	o := obj{"summary": summary, "responses": responses, "security": []obj{{"bearer": []string{}}}}
	if body != nil {
		o["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{"schema": body}}}
	}
	if len(params) > 0 {
		o["parameters"] = params
	}
	return o
}

// optionalBody marks o's request body as one the caller may leave out.
func optionalBody(o obj) obj {
	o["requestBody"].(obj)["required"] = false
	return o
}

func pathParam(name, desc string) obj {
	return obj{"name": name, "in": "path", "required": true, "description": desc, "schema": obj{"type": "string"}}
}

func query(name, desc, typ string) obj {
	return obj{"name": name, "in": "query", "description": desc, "schema": obj{"type": typ}}
}

func str() obj             { return obj{"type": "string"} }
func integer() obj         { return obj{"type": "integer"} }
func boolean() obj         { return obj{"type": "boolean"} }
func nullable(o obj) obj   { o["nullable"] = true; return o }
func arrayOf(item obj) obj { return obj{"type": "array", "items": item} }
func object(props obj) obj { return obj{"type": "object", "properties": props} }
func timestamp() obj       { return obj{"type": "string", "format": "date-time"} }
func anyObject() obj       { return obj{"type": "object", "additionalProperties": true} }
func counts() obj {
	return object(obj{"completed": integer(), "failed": integer(), "cancelled": integer()})
}
func idParam() []obj { return []obj{pathParam("id", "job id, bg-<12 hex>")} }
func sessionParam() []obj {
	return []obj{pathParam("session", "session id: 1–200 of [A-Za-z0-9._:@/-]")}
}
func idempotency() obj {
	return obj{"name": "Idempotency-Key", "in": "header", "schema": obj{"type": "string"}}
}

// Document returns the OpenAPI document, a fresh copy each call.
func Document() map[string]any {
	member := obj{
		"kind":          obj{"type": "string", "enum": []string{"turn", "work"}},
		"subagent_type": str(), "description": str(), "prompt": str(), "incognito": boolean(),
		"work":      object(obj{"type": str(), "args": anyObject()}),
		"timeout_s": obj{"type": "integer", "minimum": 0, "description": "the longest the job may run, in seconds, up to the server's BGJOBS_TURN_TIMEOUT; 0: that limit"},
	}
	spawnFields := obj{"origin_session": str(), "wait_ms": integer(), "turn_id": str(),
		"start_in_s": obj{"type": "integer", "minimum": 0, "maximum": 2592000, "description": "start the job this many seconds from now; not with wait_ms or turn_id"}}
	for k, v := range member {
		spawnFields[k] = v
	}
	spawn := object(spawnFields)
	spawn["required"] = []string{"origin_session"}
	schemas := obj{
		"Error": object(obj{"error": object(obj{"code": obj{"type": "string", "enum": []string{
			"invalid_argument", "unauthenticated", "not_found", "method_not_allowed", "forbidden", "conflict", "unsupported_media_type", "too_large", "rate_limited", "unavailable", "internal"}},
			"message": str(), "field": str()})}),
		"Agent": object(obj{"name": str(), "a2a_url": str(), "resume": obj{"type": "string", "enum": []string{"a2a", "webhook", "none"}},
			"webhook_url": str(), "webhook_secret": str(), "auto_resume": boolean(),
			"subagent_types": obj{"type": "object", "additionalProperties": str()}, "delegate_to": arrayOf(str())}),
		"SpawnRequest":  spawn,
		"SpawnResponse": object(obj{"id": str(), "status": str(), "batch_id": nullable(str()), "message": str()}),
		"Job": object(obj{"id": str(), "agent": str(), "origin_session": str(), "kind": str(), "subagent_type": str(),
			"description": str(), "prompt": str(), "work_type": str(), "work_args": anyObject(), "work_args_excerpt": str(),
			"progress": str(), "resume_state": obj{"type": "string", "enum": []string{"held", "failed", "delivered", "gave_up"}}, "resume_error": str(), "status": obj{"type": "string", "enum": []string{"queued", "running", "completed", "failed", "cancelled"}},
			"result": nullable(str()), "error": nullable(str()), "notified": boolean(), "batch_id": nullable(str()),
			"incognito": boolean(), "attempts": integer(), "report_indexed": boolean(), "generation": integer(), "depth": integer(),
			"created_at": timestamp(), "run_at": timestamp(), "timeout_s": integer(), "started_at": nullable(timestamp()), "completed_at": nullable(timestamp())}),
		"JobList":      object(obj{"jobs": arrayOf(ref("Job")), "next_cursor": nullable(str())}),
		"BatchJob":     object(member),
		"BatchRequest": object(obj{"origin_session": str(), "jobs": arrayOf(ref("BatchJob"))}),
		"BatchResult": object(obj{"batch_id": str(), "jobs": arrayOf(object(obj{"index": integer(), "id": str()})),
			"skipped": arrayOf(object(obj{"index": integer(), "error": object(obj{"code": str(), "message": str(), "field": str()})}))}),
		"Batch": object(obj{"batch_id": str(), "origin_session": str(), "size": integer(), "settled": integer(),
			"counts": counts(), "joined": boolean(), "partial": boolean(), "joined_at": nullable(timestamp()), "jobs": arrayOf(str())}),
		"Drain": object(obj{"notifications": arrayOf(object(obj{"job_id": str(), "status": str(), "description": str(),
			"batch_id": nullable(str()), "truncated": boolean(), "text": str()})), "more": boolean()}),
		"Busy":   object(obj{"session": str(), "busy": boolean()}),
		"Recall": object(obj{"total": integer(), "hits": arrayOf(object(obj{"doc_id": str(), "job_id": str(), "session": str(), "source_type": str(), "heading": str(), "snippet": str(), "score": obj{"type": "number"}, "trust_tier": integer(), "created_at": timestamp()}))}),
		"Knowledge": object(obj{"session": str(), "title": str(), "text": str(), "url": str(),
			"documents": arrayOf(object(obj{"title": str(), "text": str()}))}),
	}
	// A session action's body, where it takes one, may be left out.
	sessionAction := func(summary string, body obj, okSchema string) obj {
		o := op(summary, body, "200", ref(okSchema), append(sessionParam(), idempotency()), "400", "503")
		if body != nil {
			o = optionalBody(o)
		}
		return obj{"post": o}
	}
	paths := obj{
		"/healthz":                    obj{"get": obj{"summary": "The process is up", "responses": obj{"200": resp("up", object(obj{"status": str()}))}}},
		"/readyz":                     obj{"get": obj{"summary": "Redis answers", "responses": obj{"200": resp("ready", object(obj{"status": str()})), "503": obj{"$ref": "#/components/responses/Error"}}}},
		"/metrics":                    obj{"get": obj{"summary": "Prometheus metrics; with BGJOBS_METRICS_KEY set, its bearer key or the admin key", "responses": obj{"200": obj{"description": "text exposition format"}, "401": obj{"$ref": "#/components/responses/Error"}}}},
		"/":                           htmlPage("The console: the agent's jobs (?agent= for the admin), 100 a page (?cursor=), search (?q= an id or text), live"),
		"/console/jobs/{id}":          htmlPage("One job's row in the console (htmx, live updates)"),
		"/console/jobs/{id}/{action}": obj{"post": htmlGet("A console button: cancel, retry or delete (htmx from the console's own origin only); answers with the row")},
		"/console/batches/{id}/state": htmlPage("A batch's join state in the console (htmx)"),
		"/jobs/{id}":                  htmlPage("A job's report, its markdown rendered and sanitised"),
		"/memory":                     htmlPage("Search your memory"),
		"/batches/{id}":               htmlPage("A batch: its counts, join state and members (100 a page, ?from= the first shown), live"),
		"/login":                      obj{"get": htmlGet("Sign in"), "post": htmlGet("Sign in with a key (sets an HttpOnly, SameSite=Strict cookie)")},
		"/logout":                     obj{"post": htmlGet("Sign out")},
		"/static/{path}":              obj{"get": obj{"summary": "Embedded console assets", "responses": obj{"200": obj{"description": "file"}}}},
		"/monitoring/{path}":          monitoringPaths(),
		"/openapi.json":               obj{"get": obj{"summary": "This document", "responses": obj{"200": resp("OpenAPI 3", anyObject())}}},
		"/mcp": obj{
			"post":   obj{"summary": "MCP streamable HTTP: JSON-RPC messages", "security": []obj{{"bearer": []string{}}}, "responses": obj{"200": obj{"description": "JSON-RPC response or event stream"}, "401": obj{"description": "no or unknown key"}}},
			"get":    obj{"summary": "MCP streamable HTTP: server event stream", "security": []obj{{"bearer": []string{}}}, "responses": obj{"200": obj{"description": "event stream"}}},
			"delete": obj{"summary": "MCP streamable HTTP: end a session", "security": []obj{{"bearer": []string{}}}, "responses": obj{"200": obj{"description": "ended"}}},
		},
		"/v1/agents/{name}": obj{
			"put": op("Register where bgjobs reaches an agent", ref("Agent"), "200", ref("Agent"), []obj{pathParam("name", "agent name")}, "400", "404"),
			"get": op("Read an agent's configuration (secrets redacted)", nil, "200", ref("Agent"), []obj{pathParam("name", "agent name")}, "404"),
		},
		"/v1/jobs": obj{
			"post": withResponse(op("Spawn a job (202), or with wait_ms, answer 200 with the whole row if it ends within the budget", ref("SpawnRequest"), "202", ref("SpawnResponse"), []obj{idempotency()}, "400", "413", "503"),
				"200", resp("the job ended within wait_ms (or an Idempotency-Key repeat): the whole row; it will not drain or resume", ref("Job"))),
			"get": op("List jobs, newest first", nil, "200", ref("JobList"), []obj{query("session", "only this session", "string"),
				query("status", "only this status", "string"), query("batch_id", "only this batch", "string"),
				query("limit", "1–200, default 50", "integer"), query("cursor", "next_cursor of the previous page", "string")}, "400"),
		},
		"/v1/jobs/{id}":        obj{"get": op("Read a job", nil, "200", ref("Job"), idParam(), "400", "404"), "delete": op("Remove an ended job", nil, "204", nil, idParam(), "404", "409")},
		"/v1/jobs/{id}/cancel": obj{"post": op("Cancel a queued or running job", nil, "200", ref("Job"), idParam(), "404", "409")},
		"/v1/jobs/{id}/ack":    obj{"post": op("Mark a result consumed another way", nil, "200", object(obj{"acked": boolean()}), idParam(), "404", "409")},
		"/v1/jobs/{id}/retry":  obj{"post": optionalBody(op("Run an ended job again (a completed one only with force)", object(obj{"force": boolean()}), "200", ref("Job"), idParam(), "404", "409"))},
		"/v1/batches":          obj{"post": op("Fan out jobs as one batch", ref("BatchRequest"), "202", ref("BatchResult"), nil, "400", "413")},
		"/v1/batches/{id}":     obj{"get": op("Read a batch and its join state", nil, "200", ref("Batch"), []obj{pathParam("id", "batch id, bt-<12 hex>")}, "404")},
		"/v1/batches/{id}/cancel": obj{"post": op("Cancel every member of a batch that has not ended", nil, "200",
			obj{"allOf": []obj{ref("Batch"), object(obj{"cancelled": integer()})}}, []obj{pathParam("id", "batch id, bt-<12 hex>")}, "404")},
		"/v1/sessions/{session}/drain": sessionAction("Hand over every ended, unnotified job of the session, exactly once", nil, "Drain"),
		"/v1/sessions/{session}/busy":  sessionAction("Hold resumes while the agent is inside a turn", object(obj{"ttl_s": integer()}), "Busy"),
		"/v1/sessions/{session}/idle":  sessionAction("End the busy lease; one coalesced resume if anything is undrained", nil, "Busy"),
		"/v1/events": obj{"get": obj{"summary": "Server-Sent Events of the caller's jobs (admin: all, or ?agent=); reconnect with Last-Event-ID to replay what was missed",
			"security": []obj{{"bearer": []string{}}}, "parameters": []obj{query("agent", "admin only: one agent's events", "string"),
				query("last_event_id", "as the Last-Event-ID header, for clients that cannot set headers", "string"),
				{"name": "Last-Event-ID", "in": "header", "description": "an id this API sent: replay what came after it", "schema": str()}},
			"responses": obj{"200": obj{"description": "text/event-stream"}, "401": obj{"$ref": "#/components/responses/Error"}}}},
		"/v1/recall": obj{"get": op("Full-text search over the caller's documents", nil, "200", ref("Recall"), []obj{query("q", "words and \"quoted phrases\"", "string"),
			query("session", "only this session", "string"), query("source_type", "background_report, ingest or knowledge", "string"),
			query("limit", "1–100, default 10", "integer"), query("include_superseded", "also superseded reports", "boolean")}, "400", "503")},
		"/v1/knowledge": obj{"post": op("Index text at once (201; documents: up to 100 texts, doc_ids in order), or ingest a URL as a work job (202)", ref("Knowledge"), "201",
			object(obj{"doc_id": str(), "doc_ids": arrayOf(str()), "passages": integer()}), nil, "400", "413", "503")},
	}
	declarePathParams(paths)
	return obj{
		"openapi": "3.0.3",
		"info":    obj{"title": "bgjobs", "version": "1", "description": "Background work for AI agents, reported back to the conversation that asked for it."},
		"paths":   paths,
		"components": obj{
			"schemas":         schemas,
			"responses":       obj{"Error": resp("error", ref("Error"))},
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer"}},
		},
	}
}

// Handler serves the document.
func Handler() echo.HandlerFunc {
	doc := Document()
	return func(c echo.Context) error { return c.JSON(http.StatusOK, doc) }
}

func htmlGet(summary string) obj {
	return obj{"summary": summary, "responses": obj{"200": obj{"description": "text/html"}, "303": obj{"description": "to the sign-in page"}}}
}

func htmlPage(summary string) obj { return obj{"get": htmlGet(summary)} }

// monitoringPaths is asynqmon, for the admin key only, under every method
// its single-page app uses.
func monitoringPaths() obj {
	out := obj{}
	for _, m := range []string{"get", "post", "put", "delete", "patch", "head", "options"} {
		out[m] = obj{"summary": "asynqmon (admin key only)", "responses": obj{"200": obj{"description": "asynqmon"}, "401": obj{"$ref": "#/components/responses/Error"}}}
	}
	return out
}

// withResponse adds one more response to an operation.
func withResponse(o obj, code string, r obj) obj {
	o["responses"].(obj)[code] = r
	return o
}

// pathParamDesc describes the path parameters the console's and asynqmon's
// paths share with the API's.
var pathParamDesc = map[string]string{
	"id":     "job id (bg-<12 hex>) or batch id (bt-<12 hex>)",
	"action": "cancel, retry or delete",
	"path":   "the rest of the path",
}

// declarePathParams gives every operation each path parameter its path
// template names, as OpenAPI requires; operations that declare one already
// keep their own description.
func declarePathParams(paths obj) {
	for tmpl, item := range paths {
		var names []string
		for rest := tmpl; ; {
			i := strings.IndexByte(rest, '{')
			if i < 0 {
				break
			}
			j := strings.IndexByte(rest[i:], '}')
			names = append(names, rest[i+1:i+j])
			rest = rest[i+j:]
		}
		for _, o := range item.(obj) {
			o := o.(obj)
			params, _ := o["parameters"].([]obj)
			for _, n := range names {
				if !slices.ContainsFunc(params, func(p obj) bool { return p["in"] == "path" && p["name"] == n }) {
					params = append(params, pathParam(n, pathParamDesc[n]))
				}
			}
			if len(params) > 0 {
				o["parameters"] = params
			}
		}
	}
}
