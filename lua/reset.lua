-- tollgate reset: forget one identity's state under one algorithm (a full
-- bucket or an empty window again). Request-id markers stay. The calling
-- convention is in doc.go.
return {redis.call('DEL', KEYS[1])}
