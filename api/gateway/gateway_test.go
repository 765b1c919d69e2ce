package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// Every metered route, streamed or not, plain or gzip-encoded, settles
// its call with exactly the tokens the upstream reported, read back from
// the service's usage; each call counts one request and leaves no call in
// flight.
func TestGatewaySettlesWhatTheUpstreamReports(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx := context.Background()
	oa, an := e.openai(key), e.anthropic(key)
	for _, tc := range []struct {
		name   string
		tokens int64
		call   func(opts ...option.RequestOption) (string, error)
	}{
		{"chat", chatTokens, func(opts ...option.RequestOption) (string, error) {
			r, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), opts...)
			if err != nil {
				return "", err
			}
			return r.Choices[0].Message.Content, nil
		}},
		{"chat streamed", chatTokens, func(opts ...option.RequestOption) (string, error) {
			s := oa.Chat.Completions.NewStreaming(ctx, chat("gpt-4o-mini"), opts...)
			var text strings.Builder
			for s.Next() {
				if c := s.Current(); len(c.Choices) > 0 {
					text.WriteString(c.Choices[0].Delta.Content)
				}
			}
			return text.String(), s.Err()
		}},
		{"completion", completionTokens, func(opts ...option.RequestOption) (string, error) {
			r, err := oa.Completions.New(ctx, completion(), opts...)
			if err != nil {
				return "", err
			}
			return r.Choices[0].Text, nil
		}},
		{"completion streamed", completionTokens, func(opts ...option.RequestOption) (string, error) {
			s := oa.Completions.NewStreaming(ctx, completion(), opts...)
			var text strings.Builder
			for s.Next() {
				if c := s.Current(); len(c.Choices) > 0 {
					text.WriteString(c.Choices[0].Text)
				}
			}
			return text.String(), s.Err()
		}},
		{"response", responseTokens, func(opts ...option.RequestOption) (string, error) {
			r, err := oa.Responses.New(ctx, response(), opts...)
			if err != nil {
				return "", err
			}
			return r.OutputText(), nil
		}},
		{"response streamed", responseTokens, func(opts ...option.RequestOption) (string, error) {
			s := oa.Responses.NewStreaming(ctx, response(), opts...)
			var text strings.Builder
			for s.Next() {
				if ev := s.Current(); ev.Type == "response.output_text.delta" {
					text.WriteString(ev.Delta)
				}
			}
			return text.String(), s.Err()
		}},
		{"embedding", embeddingTokens, func(opts ...option.RequestOption) (string, error) {
			r, err := oa.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "text-embedding-3-small",
				Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("Say hello")}}, opts...)
			if err != nil {
				return "", err
			}
			return fmt.Sprint(len(r.Data[0].Embedding)), nil
		}},
		{"message", anthropicTokens, func(opts ...option.RequestOption) (string, error) {
			r, err := an.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"), anthropicOptions(opts)...)
			if err != nil {
				return "", err
			}
			return r.Content[0].Text, nil
		}},
		{"message streamed", anthropicTokens, func(opts ...option.RequestOption) (string, error) {
			s := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"), anthropicOptions(opts)...)
			var text strings.Builder
			for s.Next() {
				if ev := s.Current(); ev.Type == "content_block_delta" {
					text.WriteString(ev.Delta.Text)
				}
			}
			return text.String(), s.Err()
		}},
	} {
		for _, gzip := range []bool{false, true} {
			name := tc.name
			var opts []option.RequestOption
			if gzip {
				name += " gzip"
				opts = append(opts, option.WithHeader("X-Fake", "gzip"))
			}
			t.Run(name, func(t *testing.T) {
				before, _, requests := e.usage("alice")
				got, err := tc.call(opts...)
				if err != nil {
					t.Fatalf("call: %v", err)
				}
				if want := "Hello"; got != want && tc.name != "embedding" {
					t.Errorf("the client read %q, want %q", got, want)
				}
				after, inFlight, requestsAfter := e.usage("alice")
				if after-before != tc.tokens {
					t.Errorf("tokens settled %d, want the upstream's %d", after-before, tc.tokens)
				}
				if inFlight != 0 || requestsAfter != requests+1 {
					t.Errorf("calls in flight %d, requests %d → %d: want 0 in flight and one more request", inFlight, requests, requestsAfter)
				}
			})
		}
	}
}

// anthropicOptions turns the OpenAI options of the table above (a header)
// into the Anthropic SDK's.
func anthropicOptions(opts []option.RequestOption) []anthropicoption.RequestOption {
	if len(opts) == 0 {
		return nil
	}
	return []anthropicoption.RequestOption{anthropicoption.WithHeader("X-Fake", "gzip")}
}

func completion() openai.CompletionNewParams {
	return openai.CompletionNewParams{Model: "gpt-3.5-turbo-instruct", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say hello")}}
}

func response() responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: "gpt-4o-mini", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")}}
}

// A streamed chat or text completion whose client did not ask for the
// usage is asked for it upstream, and its usage-only chunk kept from the
// client; a client that asked gets it, and the upstream is asked as the
// client asked.
func TestGatewayHidesTheUsageChunkUnlessAsked(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx := context.Background()
	oa := e.openai(key)
	for _, asked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chat asked=%t", asked), func(t *testing.T) {
			params := chat("gpt-4o-mini")
			if asked {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			s := oa.Chat.Completions.NewStreaming(ctx, params)
			var chunks, usageChunks int
			for s.Next() {
				chunks++
				if c := s.Current(); len(c.Choices) == 0 && c.Usage.TotalTokens > 0 {
					usageChunks++
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 0, true: 1}[asked]; usageChunks != want || chunks != fakeStreamChunks+want {
				t.Errorf("the client saw %d chunks, %d with only the usage; want %d and %d", chunks, usageChunks, fakeStreamChunks+want, want)
			}
			reqs := e.fake.Requests()
			var sent struct {
				StreamOptions map[string]any `json:"stream_options"`
			}
			json.Unmarshal(reqs[len(reqs)-1].Body, &sent)
			if sent.StreamOptions["include_usage"] != true {
				t.Errorf("the upstream was sent stream_options %v, want include_usage true", sent.StreamOptions)
			}
		})
	}
	t.Run("completion", func(t *testing.T) {
		s := oa.Completions.NewStreaming(ctx, completion())
		chunks := 0
		for s.Next() {
			if len(s.Current().Choices) == 0 {
				t.Errorf("the client saw the usage chunk it did not ask for: %s", s.Current().RawJSON())
			}
			chunks++
		}
		if err := s.Err(); err != nil || chunks != fakeStreamChunks {
			t.Errorf("%d chunks (%v), want %d", chunks, err, fakeStreamChunks)
		}
	})
	if tokens, _, _ := e.usage("alice"); tokens != 2*chatTokens+completionTokens {
		t.Errorf("tokens %d, want %d", tokens, 2*chatTokens+completionTokens)
	}
}

// A stream is relayed event by event: the client reads the first event
// while the upstream has not sent the second, which it sends only once the
// client has read the first. A gateway that buffered would never deliver.
func TestGatewayStreamsEventsAsTheyCome(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	an := e.anthropic(key)
	s := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"), anthropicoption.WithHeader("X-Fake", "hold"))
	if !s.Next() || s.Current().Type != "message_start" {
		t.Fatalf("first event: %v", s.Err())
	}
	e.fake.ReleaseHeld()
	n := 1
	for s.Next() {
		n++
	}
	if err := s.Err(); err != nil || n != 6 {
		t.Fatalf("%d events (%v), want 6", n, err)
	}
}

func statusOf(err error) int {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe.StatusCode
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// rawError returns the error body an SDK's err read, "" for another error.
func rawError(err error) string {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe.RawJSON()
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return ae.RawJSON()
	}
	return ""
}
