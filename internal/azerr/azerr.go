// Package azerr is the one catalogue of Azure Table service error codes: each code's HTTP
// status and default message (docs/protocol.md §7). Lower layers return *Error values (or typed
// storage errors that the table layer maps to them); only the server layer renders them.
package azerr

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is an Azure storage error code as sent in x-ms-error-code.
type Code string

// The codes Cerulean emits. Statuses and messages are in the catalogue below.
const (
	AtomFormatNotSupported            Code = "AtomFormatNotSupported"
	AuthenticationFailed              Code = "AuthenticationFailed"
	AuthorizationFailure              Code = "AuthorizationFailure"
	AuthorizationPermissionMismatch   Code = "AuthorizationPermissionMismatch"
	AuthorizationProtocolMismatch     Code = "AuthorizationProtocolMismatch"
	AuthorizationResourceTypeMismatch Code = "AuthorizationResourceTypeMismatch"
	AuthorizationServiceMismatch      Code = "AuthorizationServiceMismatch"
	AuthorizationSourceIPMismatch     Code = "AuthorizationSourceIPMismatch"
	CorsPreflightFailure              Code = "CorsPreflightFailure"
	// ChangeFeedContinuationExpired is Cerulean's own (docs/change-feed.md): the changes
	// after a change feed continuation were removed by the table's retention, or the
	// continuation is not one of the table's feed.
	ChangeFeedContinuationExpired           Code = "ChangeFeedContinuationExpired"
	CommandsInBatchActOnDifferentPartitions Code = "CommandsInBatchActOnDifferentPartitions"
	DuplicatePropertiesSpecified            Code = "DuplicatePropertiesSpecified"
	EntityAlreadyExists                     Code = "EntityAlreadyExists"
	EntityTooLarge                          Code = "EntityTooLarge"
	// UniqueIndexViolation is Cerulean's own: a write would give a unique secondary
	// index of an elastic table a value another entity holds (docs/indexes-design.md §3).
	UniqueIndexViolation      Code = "UniqueIndexViolation"
	HostInformationNotPresent Code = "HostInformationNotPresent"
	InternalError             Code = "InternalError"
	InvalidAuthenticationInfo Code = "InvalidAuthenticationInfo"
	// KeyBasedAuthenticationNotPermitted refuses a shared key or SAS on an account whose
	// shared key access is off (Azure's allowSharedKeyAccess=false).
	KeyBasedAuthenticationNotPermitted Code = "KeyBasedAuthenticationNotPermitted"
	InvalidDuplicateRow                Code = "InvalidDuplicateRow"
	InvalidHeaderValue                 Code = "InvalidHeaderValue"
	InvalidHTTPVerb                    Code = "InvalidHttpVerb"
	InvalidInput                       Code = "InvalidInput"
	InvalidQueryParameterValue         Code = "InvalidQueryParameterValue"
	InvalidResourceName                Code = "InvalidResourceName"
	InvalidURI                         Code = "InvalidUri"
	InvalidValueType                   Code = "InvalidValueType"
	InvalidXMLDocument                 Code = "InvalidXmlDocument"
	JSONFormatNotSupported             Code = "JsonFormatNotSupported"
	MediaTypeNotSupported              Code = "MediaTypeNotSupported"
	MethodNotAllowed                   Code = "MethodNotAllowed"
	MissingRequiredHeader              Code = "MissingRequiredHeader"
	NoAuthenticationInformation        Code = "NoAuthenticationInformation"
	NotImplemented                     Code = "NotImplemented"
	OperationTimedOut                  Code = "OperationTimedOut"
	OutOfRangeInput                    Code = "OutOfRangeInput"
	PropertiesNeedValue                Code = "PropertiesNeedValue"
	PropertyNameInvalid                Code = "PropertyNameInvalid"
	PropertyNameTooLong                Code = "PropertyNameTooLong"
	PropertyValueTooLarge              Code = "PropertyValueTooLarge"
	RequestBodyTooLarge                Code = "RequestBodyTooLarge"
	RequestURLFailedToParse            Code = "RequestUrlFailedToParse"
	ResourceNotFound                   Code = "ResourceNotFound"
	ServerBusy                         Code = "ServerBusy"
	TableAlreadyExists                 Code = "TableAlreadyExists"
	TableBeingDeleted                  Code = "TableBeingDeleted"
	TableNotFound                      Code = "TableNotFound"
	TooManyProperties                  Code = "TooManyProperties"
	UnsupportedHeader                  Code = "UnsupportedHeader"
	UnsupportedHTTPVerb                Code = "UnsupportedHttpVerb"
	UpdateConditionNotSatisfied        Code = "UpdateConditionNotSatisfied"
	XMethodIncorrectCount              Code = "XMethodIncorrectCount"
	XMethodIncorrectValue              Code = "XMethodIncorrectValue"
	XMethodNotUsingPost                Code = "XMethodNotUsingPost"
)

type entry struct {
	status  int
	message string
}

// catalogue maps every code to its HTTP status and the service's default wording.
var catalogue = map[Code]entry{
	AtomFormatNotSupported:                  {http.StatusUnsupportedMediaType, "Atom format is not supported."},
	AuthenticationFailed:                    {http.StatusForbidden, "Server failed to authenticate the request. Make sure the value of the Authorization header is formed correctly including the signature."},
	AuthorizationFailure:                    {http.StatusForbidden, "This request is not authorized to perform this operation."},
	AuthorizationPermissionMismatch:         {http.StatusForbidden, "This request is not authorized to perform this operation using this permission."},
	AuthorizationProtocolMismatch:           {http.StatusForbidden, "This request is not authorized to perform this operation using this protocol."},
	AuthorizationResourceTypeMismatch:       {http.StatusForbidden, "This request is not authorized to perform this operation using this resource type."},
	AuthorizationServiceMismatch:            {http.StatusForbidden, "This request is not authorized to perform this operation using this service."},
	AuthorizationSourceIPMismatch:           {http.StatusForbidden, "This request is not authorized to perform this operation using this source IP."},
	ChangeFeedContinuationExpired:           {http.StatusGone, "The changes after this continuation are no longer retained by the table's change feed (its retention removed them, or the continuation is not one of this table's feed). Read again from 'beginning' or 'now'."},
	CorsPreflightFailure:                    {http.StatusForbidden, "CORS not enabled or no matching rule found for this request."},
	CommandsInBatchActOnDifferentPartitions: {http.StatusBadRequest, "All commands in a batch must operate on same entity group."},
	DuplicatePropertiesSpecified:            {http.StatusBadRequest, "A property is specified more than one time."},
	EntityAlreadyExists:                     {http.StatusConflict, "The specified entity already exists."},
	UniqueIndexViolation:                    {http.StatusConflict, "The entity holds a value of a unique index that another entity of the table holds."},
	EntityTooLarge:                          {http.StatusBadRequest, "The entity is larger than the maximum size permitted."},
	HostInformationNotPresent:               {http.StatusBadRequest, "The required host information is not present in the request. You must send a non-empty Host header or include the absolute URI in the request line."},
	InternalError:                           {http.StatusInternalServerError, "Server encountered an internal error. Please try again after some time."},
	InvalidAuthenticationInfo:               {http.StatusBadRequest, "Authentication information is not given in the correct format. Check the value of Authorization header."},
	KeyBasedAuthenticationNotPermitted:      {http.StatusForbidden, "Key based authentication is not permitted on this storage account."},
	InvalidDuplicateRow:                     {http.StatusBadRequest, "The batch request contains multiple changes with same row key. An entity can appear only once in a batch request."},
	InvalidHeaderValue:                      {http.StatusBadRequest, "The value for one of the HTTP headers is not in the correct format."},
	InvalidHTTPVerb:                         {http.StatusBadRequest, "The HTTP verb specified was not recognized by the server."},
	InvalidInput:                            {http.StatusBadRequest, "One of the request inputs is not valid."},
	InvalidQueryParameterValue:              {http.StatusBadRequest, "Value for one of the query parameters specified in the request URI is invalid."},
	InvalidResourceName:                     {http.StatusBadRequest, "The specifed resource name contains invalid characters."},
	InvalidURI:                              {http.StatusBadRequest, "The requested URI does not represent any resource on the server."},
	InvalidValueType:                        {http.StatusBadRequest, "The value specified is invalid."},
	InvalidXMLDocument:                      {http.StatusBadRequest, "XML specified is not syntactically valid."},
	JSONFormatNotSupported:                  {http.StatusUnsupportedMediaType, "JSON format is not supported."},
	MediaTypeNotSupported:                   {http.StatusUnsupportedMediaType, "None of the provided media types are supported."},
	MethodNotAllowed:                        {http.StatusMethodNotAllowed, "The requested method is not allowed on the specified resource."},
	MissingRequiredHeader:                   {http.StatusBadRequest, "An HTTP header that's mandatory for this request is not specified."},
	NoAuthenticationInformation:             {http.StatusUnauthorized, "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."},
	NotImplemented:                          {http.StatusNotImplemented, "The requested operation is not implemented on the specified resource."},
	OperationTimedOut:                       {http.StatusInternalServerError, "The operation could not be completed within the permitted time."},
	OutOfRangeInput:                         {http.StatusBadRequest, "One of the request inputs is out of range."},
	PropertiesNeedValue:                     {http.StatusBadRequest, "The values are not specified for all properties in the entity."},
	PropertyNameInvalid:                     {http.StatusBadRequest, "The property name is invalid."},
	PropertyNameTooLong:                     {http.StatusBadRequest, "The property name exceeds the maximum allowed length."},
	PropertyValueTooLarge:                   {http.StatusBadRequest, "The property value exceeds the maximum allowed size (64KB). If the property value is a string, it is UTF-16 encoded and the maximum number of characters should be 32K or less."},
	RequestBodyTooLarge:                     {http.StatusRequestEntityTooLarge, "The request body is too large and exceeds the maximum permissible limit."},
	RequestURLFailedToParse:                 {http.StatusBadRequest, "The url in the request could not be parsed."},
	ResourceNotFound:                        {http.StatusNotFound, "The specified resource does not exist."},
	ServerBusy:                              {http.StatusServiceUnavailable, "The server is currently unable to receive requests. Please retry your request."},
	TableAlreadyExists:                      {http.StatusConflict, "The table specified already exists."},
	TableBeingDeleted:                       {http.StatusConflict, "The specified table is being deleted."},
	TableNotFound:                           {http.StatusNotFound, "The table specified does not exist."},
	TooManyProperties:                       {http.StatusBadRequest, "The entity contains more properties than allowed."},
	UnsupportedHeader:                       {http.StatusBadRequest, "One of the HTTP headers specified in the request is not supported."},
	UnsupportedHTTPVerb:                     {http.StatusMethodNotAllowed, "The resource doesn't support specified Http Verb."},
	UpdateConditionNotSatisfied:             {http.StatusPreconditionFailed, "The update condition specified in the request was not satisfied."},
	XMethodIncorrectCount:                   {http.StatusBadRequest, "More than one X-HTTP-Method is specified."},
	XMethodIncorrectValue:                   {http.StatusBadRequest, "The specified X-HTTP-Method is invalid."},
	XMethodNotUsingPost:                     {http.StatusBadRequest, "X-HTTP-Method used with a verb other than POST."},
}

// Error is a service error ready to render: a catalogue code, its status, and a message that
// is the catalogue's default unless a more specific one was given.
type Error struct {
	Code    Code
	Status  int
	Message string
	// Detail is extra diagnostic text (for example AuthenticationErrorDetail); optional.
	Detail string
	// Fields are named values the service adds to some error bodies, after the message
	// (HeaderName and HeaderValue for a bad header); optional.
	Fields []Field
}

// Field is one named value of an error body.
type Field struct{ Name, Value string }

func (e *Error) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Detail)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// New returns the error for code with the catalogue's default message.
func New(code Code) *Error {
	ent, ok := catalogue[code]
	if !ok {
		panic("azerr: code not in catalogue: " + string(code))
	}
	return &Error{Code: code, Status: ent.status, Message: ent.message}
}

// Newf returns the error for code with a specific message.
func Newf(code Code, format string, args ...any) *Error {
	e := New(code)
	e.Message = fmt.Sprintf(format, args...)
	return e
}

// WithDetail returns a copy of e carrying a diagnostic detail.
func (e *Error) WithDetail(detail string) *Error {
	c := *e
	c.Detail = detail
	return &c
}

// OutOfRange is the service's wording for a parameter whose value is not allowed:
// "The '<name>' parameter of value '<value>' is out of range."
func OutOfRange(name, value string) *Error {
	return Newf(OutOfRangeInput, "The '%s' parameter of value '%s' is out of range.", name, value)
}

// InvalidHeader is 400 InvalidHeaderValue naming the header and the value refused, as the
// service reports them: <HeaderName> and <HeaderValue> after the message.
func InvalidHeader(name, value string) *Error {
	e := New(InvalidHeaderValue)
	e.Fields = []Field{{"HeaderName", name}, {"HeaderValue", value}}
	return e
}

// InvalidXML is 400 InvalidXmlDocument, the service's answer to any request body it refuses
// in the XML documents of service properties and access policies — malformed XML and a
// well-formed document with a value out of bounds alike — with the reason in a <Reason>
// element after the message, as the service gives it ("Element Days is only expected when
// RetentionPolicy is enabled."); docs/compatibility.md "Unknown operations, invalid XML values, the end of a listing, secrets in logs".
func InvalidXML(reason string) *Error {
	e := New(InvalidXMLDocument)
	if reason != "" {
		e.Fields = []Field{{"Reason", reason}}
	}
	return e
}

// BearerRefused is the service's answer to a bearer token that does not verify (expired,
// not yet valid, another issuer or audience, a bad signature): 401 InvalidAuthenticationInfo
// with this message, the reason as AuthenticationErrorDetail ("Audience validation failed.
// Audience did not match."), and a WWW-Authenticate challenge the caller adds. The code
// is the one of malformed credentials (400), with the status and message of a token
// refused, as Azure Storage answers.
func BearerRefused(detail string) *Error {
	e := New(InvalidAuthenticationInfo)
	e.Status = http.StatusUnauthorized
	e.Message = "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."
	e.Detail = detail
	return e
}

// As extracts an *Error from err's chain; anything else becomes InternalError, which is a bug.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return New(InternalError), false
}

// Status returns the HTTP status registered for code.
func Status(code Code) int { return catalogue[code].status }
